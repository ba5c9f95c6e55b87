"""``python -m tools.stack``: see tools/stack/runner.py."""

from __future__ import annotations

import sys

from tools.stack.runner import main

sys.exit(main())
