"""Queue backends. Each module keeps its driver's types to itself."""
