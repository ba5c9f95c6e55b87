"""Developer tools that are neither jobq nor its tests: ``tools.stack`` runs the compose stack natively."""
