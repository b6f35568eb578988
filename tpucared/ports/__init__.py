"""The two ports: everything the daemon needs from a cloud, and from whatever runs a workload.

The runtime (tpucared/runtime) talks to clouds and to workers only through these `Protocol`s; it
never names an implementation but in its wiring modules (runtime/clouds.py, runtime/startup.py,
runtime/workload/launchers.py: import-linter's "the runtime talks to ports" contract). Each
sits between the runtime and the adapters that implement it:

- `cloud`     the **Cloud** port (`Cloud`): list one location's nodes as core observations (a
              failed list is data, never an exception), create a node / queued slot /
              multislice from a `NodeShape`, delete one, poll an operation (`OperationState`),
              a node's workers' published host keys, and the OS Login calls where the cloud
              has them (`OsLogin`); failures are `CloudError`s carrying the core `ErrorKind`;
              `TokenSource`, the credentials its implementations are connected with.
              The TPU API implements it in `tpucared/gcp/tpu/` (`TpuCloud`); a new cloud
              implements it in a package of its own and maps its states into the core's
              `StateClass` in one table.
- `launcher`  the **Launcher** port (`Launcher`): locate a slice's workers, probe the run on
              them, install its files and secrets, launch it, signal it, clean a worker's TPU
              up (stop), wait for the preemption notice; every answer per worker, as data
              (`Reply`). The SSH implementation lives in `tpucared/launch/` (`SshLauncher`),
              over `tpucared/ssh/` as transport; it checks the host keys the runtime pins
              (`HostKeys`). Beside it, `ByHand`: what `tpucared logs` / `exec` / `cp` need
              (`SshByHand`, tpucared/launch/by_hand.py).

Only types live here (protocols and the plain values they exchange): no I/O, no clients. The
adapters satisfy the protocols structurally and may import the value types from here.
"""
