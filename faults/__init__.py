"""The fault suite (``make chaos``, ``python -m faults``): jobq under kill -9, server restarts
and crashes and cut connections, checked for lost jobs. Outside the default test run: it
restarts and crashes the local servers (and always starts them again)."""
