"""`python -m bench.fanout profile ...` (see bench/fanout/profiling.py)."""

import sys

from bench.fanout import main

sys.exit(main())
