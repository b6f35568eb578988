"""`python -m tpucared`: the same entry point as the `tpucared` console script."""

from tpucared.cli.main import main

raise SystemExit(main())
