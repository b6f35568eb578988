"""The `tpucared` command line: one module per command family.

- `main`      the argument parser and `main()`; every subcommand is declared here.
- `commands`  `run`, `plan`, `down` / `up`, `db upgrade`, `logs` / `exec` / `cp`.
- `plan`      `tpucared plan`: what the daemon would do now, changing nothing.
- `inspect`   `tpucared status` and `tpucared events` (read the database only).
`tpucared emulator`, `demo` and `babysit` are handed to their own packages.
"""
