"""A local, faithful Cloud TPU v2 API: how tests, benchmarks and demos see "the cloud".

`tpucared.emulator.server` serves the real `/v2/...` REST paths (errors, operations, paging
and all) plus a control API under `/_emulator/v1/` for preemptions, capacity, faults and
timing. Layout: `state` answers the calls on the emulated cloud, whose records (nodes,
operations, capacity), timers and node transitions are `lifecycle`'s and whose queued resources
are `queued`'s; `api` and `control` translate HTTP; `middleware` applies faults and logs
requests; `driver` runs timers and the worker-hosts hook; `server` wires it all and is the CLI;
`thread` runs one in a background thread for synchronous callers.

Queued resources may be multislice: a node spec's `multisliceParams {nodeCount, nodeIdPrefix}`
makes nodeCount nodes `{prefix}-0` .. (each `multisliceNode: true`), provisioned all at once,
suspended when any is lost, deleted and reset together; their worker hosts (SSH, metadata,
notices) and the control API's node actions work on each of them as on any node.
"""

from tpucared.emulator.options import EmulatorOptions
from tpucared.emulator.server import EmulatorServer, running_emulator
from tpucared.emulator.thread import EmulatorThread

__all__ = ["EmulatorOptions", "EmulatorServer", "EmulatorThread", "running_emulator"]
