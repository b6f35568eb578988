"""The daemon's worker side: the workload on every worker of a slice, through the Launcher port.

Every remote step goes through a `Launcher` (tpucared/ports/launcher.py); the daemon's is the
SSH launcher (tpucared/launch/, made in `launchers`), a test may give the runner another.

- `runner`   probes a slot's workers (every slice's), and hands workload actions to its
             executor; `probe_jobs` holds what one probe is of.
- `notices`  one wait per running slice for its preemption notice, heard at once; what
             follows is core/workload/notices.py's rule, carried out.
- `notice_events` the `preemption.notice` event of a notice the poll's probe read first,
             written when the attempt ends (once per node, whichever path came first).
- `executor` carries out workload actions (launch, stop, cleanup, finish): the workload is
             (re)launched in `WorkloadExecutor._launch`, or refused as
             core/workload/launch_gate.py says.
- `jobs`     one background job per slot, a probe or a chain of actions; only starts and
             cancels, the decisions are core's.
- `failures` a slot's job that failed unexpectedly: logged, recorded, held back for the
             backoff, retried; never the daemon's end.
- `hosts`    the host keys pinned per incarnation's worker (the port's `HostKeys`, given to
             the SSH launcher by `launchers`).
- `launchers` the wiring: which launcher the daemon runs workloads with (the SSH one,
             `ssh_launcher`), what `by_hand` reaches workers with, the cloud's host keys;
             the only module here that names tpucared/launch, tpucared/ssh (import-linter).
- `by_hand`  `tpucared logs`, `exec`, `cp`: reaching a fleet's workers by hand, through the
             `ByHand` port (over SSH: tpucared/launch/by_hand.py).
"""
