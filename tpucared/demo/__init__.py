"""`tpucared demo` and `tpucared babysit`: the daemon's engine, run in the foreground for a person.

Nothing here decides anything about nodes or workloads; both commands drive the same
`tpucared.runtime.daemon.Daemon` that `tpucared run` runs, over the same SQLite store.

- `engine`: the daemon's start-up (migrate, store, key, credentials, client, telemetry) and
  its run, stopped by the caller's event or by an `until(tick)` test instead of by signals.
- `example`: finds deploy/examples/emulator.toml and points it at an in-process emulator.
- `scenario`: the demo's schedule of preemptions and a stockout, and the control-API calls
  that inject them (a TPU API node's, or a Compute Engine VM's for a `compute` fleet).
- `progress`: reads the toy workload's checkpoints (deploy/examples/toy_train.py).
- `presenter`: what the demo prints: a status view refreshed in place on a TTY, event lines
  otherwise, and the closing summary.
- `run`: `tpucared demo`, wiring the above into one process.
- `babysit`: `tpucared babysit`, one slice running one command, no config file.
"""
