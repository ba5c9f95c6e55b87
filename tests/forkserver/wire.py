"""What the fork server and its client share."""

from __future__ import annotations

import struct
from importlib import metadata

# Read by the interpreter as it starts: a command whose value differs from the server's would
# not start the same, so it is exec'd instead.
STARTUP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONOPTIMIZE",
           "PYTHONDEVMODE", "PYTHONWARNINGS", "PYTHONUTF8", "PYTHONIOENCODING", "PYTHONHASHSEED",
           "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONMALLOC", "PYTHONTRACEMALLOC")
HEADER = struct.Struct("!I")
READY_WITHIN = 60.0  # seconds for the server to import everything and listen


def scripts() -> dict[str, str]:
    """The console scripts of jobq's distribution: name -> ``module:function``."""
    return {ep.name: ep.value for ep in metadata.distribution("jobq").entry_points
            if ep.group == "console_scripts"}
