"""tpucared's benchmarks: `python -m bench.run [--quick] [--only NAME]` (see bench/run.py).

Each benchmark is a module here exposing `run(quick: bool) -> dict`, registered in
`bench.run.BENCHMARKS`; its result lands in `bench/results/<name>.json` together with the
machine and the versions it ran on. Method, figures and analysis: docs/benchmarks.md.
"""
