"""The daemon: the reconcile loop, the executor that turns planned actions into cloud calls
and store writes, signals and shutdown. The only layer that wires gcp, store, ssh and core.

It never decides: it observes, reads the store, asks `core.planner.plan`, records intent,
calls the cloud, records outcomes (docs/daemon.md). Modules, in the order a tick uses them:

- `loop`        when to tick: the poll, the end of a create backoff, or a wake.
- `reconciler`  one tick: observe -> snapshot -> plan -> execute.
- `observer`    one paginated list per (project, zone), all zones at once.
- `executor`    each action in plan order, as core/actions.py says; intent before calls.
- `calls`       the create and delete calls, in the background, and their outcomes.
- `operations`  polls long-running operations; records their end; wakes the loop.
- `wakeup`, `clock`, `tasks`, `signals`: waking, injected time, supervised root tasks and
  background calls, two-stage SIGTERM/SIGINT.
- `daemon`      wires it all (`Daemon`) and is `tpucared run` (`run_daemon`).
- `startup`, `errors`, `telemetry`: SSH key and credentials, start-up errors, /healthz
  /metrics /v1/status.
- `preview`, `down`, `commands`: `tpucared plan`, `down` / `up`, and the CLI entry points.
- `workload*`   the workload runner over SSH and `logs` / `exec` / `cp` (their docstrings).
"""
