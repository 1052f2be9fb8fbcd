"""``python -m bench.faults``: see ``bench/faults/README.md``."""

import sys

from bench.faults.cli import main

sys.exit(main())
