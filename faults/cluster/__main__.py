"""``python -m faults.cluster``: see faults/cluster/__init__.py."""

import sys

from faults.cluster.cli import main

sys.exit(main())
