"""A local, faithful Cloud TPU v2 API (and Compute Engine v1 for TPU VMs): how tests,
benchmarks and demos see "the cloud".

`tpucared_emulator.server` serves the real `/v2/...` REST paths (errors, operations, paging
and all) plus a control API under `/_emulator/v1/` for preemptions, capacity, faults and
timing. Layout: `state` answers the calls on the emulated cloud, whose records (nodes,
operations, capacity), timers and node transitions are `lifecycle`'s and whose queued resources
are `queued`'s; `api` and `control` translate HTTP; `middleware` applies faults and logs
requests; `driver` runs timers and the worker-hosts hook; `server` wires it all and is the CLI;
`thread` runs one in a background thread for synchronous callers.

On the same port and the same emulated cloud, compute/ serves the Compute Engine v1 API for
TPU VMs (`/compute/v1/...`: instances, zone operations, TPU machine types), attached to the
state as its `vms` (vm_hook.py); every RUNNING instance is a simulated worker host like a
one-worker node, and capacity, faults, the request log, the control API and the state file
cover instances too.

Queued resources may be multislice: a node spec's `multisliceParams {nodeCount, nodeIdPrefix}`
makes nodeCount nodes `{prefix}-0` .. (each `multisliceNode: true`), provisioned all at once,
suspended when any is lost, deleted and reset together; their worker hosts (SSH, metadata,
notices) and the control API's node actions work on each of them as on any node.
"""

from tpucared_emulator.options import EmulatorOptions
from tpucared_emulator.server import EmulatorServer, running_emulator
from tpucared_emulator.thread import EmulatorThread

__version__ = "0.1.0"
__all__ = ["EmulatorOptions", "EmulatorServer", "EmulatorThread", "running_emulator"]
