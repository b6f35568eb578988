"""`python -m bench.capacity [--quick] [--model] [--hunt] ...` (see bench/capacity/__init__.py)."""

import sys

from bench.capacity import main

sys.exit(main())
