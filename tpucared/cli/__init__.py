"""The `tpucared` command line: one module per command family.

`main` parses; each handler lives in its family's module, imported only when its command runs
(so a typo costs no import of aiohttp, SQLAlchemy or asyncssh), and returns the exit status:
0 ok, 1 a runtime failure, 2 a problem a person must fix (`UsageError`, one line).

- `main`        the argument parser and `main()`: every subcommand is declared here.
- `daemon`      `tpucared run` (the daemon: tpucared/runtime/daemon.py) and `db upgrade`.
- `plan`        `tpucared plan`: what the daemon would do now, changing nothing.
- `down`        `tpucared down` / `up` (the deleting: tpucared/runtime/down.py).
- `workers`     `tpucared logs` / `exec` / `cp` (the SSH work: runtime/workload/by_hand.py).
- `inspect`     `tpucared status` / `events`: read the database only.
- `goodput`     `tpucared goodput`: each slot's badput ledger and its cost, read-only.
- `config_arg`  `-c FILE` / `$TPUCARED_CONFIG`, loaded or refused with a one-line error.
`tpucared emulator`, `demo` and `babysit` are handed to their own packages.
"""
