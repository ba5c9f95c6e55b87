"""``python -m faults``: see faults/suite.py."""

from __future__ import annotations

import sys

from faults.suite import main

sys.exit(main())
