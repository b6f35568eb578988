"""The daemon: the only layer that wires the clouds' ports, store, the launcher and core together.

It never decides: each tick it observes, reads the store, asks `core.planning.tick.plan_tick`,
records intent, calls the cloud or the workers, records outcomes (docs/daemon.md).

- `daemon`      wires it all (`Daemon`) and is `tpucared run` (`run_daemon`).
- `loop`        when to tick: the poll, the end of a create backoff, or a wake.
- `reconciler`  one tick: observe -> snapshot -> plan -> execute.
- `clouds`      the Cloud ports (tpucared/ports/cloud.py) by cloud API, and each fleet's:
                the runtime never names an implementation (the TPU API's: gcp/tpu/).
- `nodes/`      the cloud side: `observer` (one list per zone), `executor` (each node action in
                plan order, intent before calls), `calls` (creates and deletes in the
                background), `operations` (polls long-running operations, records their end).
- `workload/`   the worker side, through the Launcher port (tpucared/ports/launcher.py; the
                SSH one is tpucared/launch/): `runner` (probes and workload actions), `jobs`
                (one background job per slot, started and cancelled), `notices`, `hosts`,
                `launchers`, and `by_hand` (what `tpucared logs` / `exec` / `cp` do, through
                the ByHand port). Only the wiring modules (`clouds`, `startup`,
                `workload/launchers`) name tpucared/gcp, ssh, launch (import-linter).
- `telemetry/`  what the daemon shows of itself: `server` (/healthz /metrics /v1/status),
                `metrics` (Prometheus families), `endpoints` (the wiring).
- `sdnotify`    what systemd hears (READY=1, WATCHDOG=1 per tick, STATUS=, STOPPING=1).
- `leader`      the leader lease's keeper: takes and renews it, fences writes and calls,
                steps down; `terms` stands by and leads by turns (a fresh daemon per term).
- `down`        delete every node tpucared owns for some fleets (`tpucared down`, babysit).
- `oslogin`     the daemon's key in its OS Login profile, where the cloud has OS Login.
- `wakeup`, `clock`, `tasks`, `signals`, `startup`, `errors`: waking the loop, injected time,
  supervised tasks, two-stage SIGTERM/SIGINT, what must exist before the first call.
"""
