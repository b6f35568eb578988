"""The emulated Compute Engine v1 API: TPU VMs as instances, on the same port as the TPU API.

Served under `/compute/v1/` by the same aiohttp application as `/v2` (server.py), behind the
same request pipeline (middleware.py: faults, request log, clock), on the same emulated cloud
(one clock, one timer heap, one capacity table, one set of loopback addresses): instances
insert / get / list / delete / getGuestAttributes, zone operations get / list / wait,
machineTypes.get for the TPU machine types, and multi-host slices as managed instance groups
(zonal and regional instanceGroupManagers with listManagedInstances, instance templates,
workload policies; regional and global operations get / wait). A flex-start instance waits
PENDING for capacity, then runs for its maxRunDuration (flex.py). Every RUNNING instance is a
simulated worker host (hosts/), SSH and metadata server, exactly like a one-worker TPU node.
Shapes, wording and the behaviours Google has not documented (each an
`EmulatorOptions.compute_*` option) follow docs/research/compute-engine.md.

Layout, in the order a request flows:
    api         routing, query parameters, `fields`, operations.wait
    limits      per-minute rate quotas (none by default)
    requests    what each call does: validation, capacity, stockouts, requestId replay, reads
    validation  the checks of an insert body, in compute's wording
    filters     the `filter` expressions of lists
    mig_requests  the instanceGroupManagers calls (insert, get, list, listManagedInstances,
                delete, resize)
    shared      workload policies and instance templates: records and calls
    migs        the managed instance groups: records, members, bulk mode, repair, deletion
    book        the records (instances, operations) and their lifecycle, timers, preemptions;
                the one instance creation function, for instances.insert and for MIGs
    operations  the operations (zonal, regional, global) and requestId replay: the book's base
    hooks       what the book sees of the groups (and of an operation's target)
    flex        flex-start: the capacity queue of PENDING instances, the run that ends
    resources   Instance, ZoneOperation, VmHost (the instance as the worker hosts see it)
    errors      compute's HTTP envelope and operation errors; faults' compute answers
    control     the control API's instance actions (:preempt, :terminate, :vanish)
"""

from tpucared_emulator.compute.api import ComputeApi
from tpucared_emulator.compute.book import ComputeBook
from tpucared_emulator.compute.control import ComputeControl
from tpucared_emulator.compute.mig_requests import MigRequests
from tpucared_emulator.compute.migs import Migs
from tpucared_emulator.compute.requests import ComputeRequests
from tpucared_emulator.compute.shared import Shared

__all__ = [
    "ComputeApi",
    "ComputeBook",
    "ComputeControl",
    "ComputeRequests",
    "MigRequests",
    "Migs",
    "Shared",
]
