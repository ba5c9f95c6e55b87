"""The fault suite (``make chaos``, ``python -m faults``): jobq under kill -9, server restarts
and cut connections, checked for lost jobs. Outside the default test run: it restarts the
local servers."""
