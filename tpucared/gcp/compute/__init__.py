"""The Compute Engine adapter: single-host TPU VMs as compute v1 instances, one per slot, and
multi-host slices as zonal managed instance groups, one MIG per slot (issue 28).

The Cloud port's second Google implementation (tpucared/ports/cloud.py), beside `gcp/tpu/`,
over the same request path (gcp/rest.py), error classification (gcp/errors.py), response
checks and field readers (gcp/responses.py, gcp/fields.py):

- `names`      compute v1 paths, built and taken apart in one place (an operation's path
               is the name the port hands out).
- `operation`  the zonal `Operation` value, its error classified by errors.py.
- `bodies`     the instances.insert body from a `NodeShape` (image, disk, network,
               scheduling per capacity tier, labels, metadata).
- `client`     `ComputeClient`: instances insert/list/get/delete/getGuestAttributes, zone
               operations get/wait/list; resourcePolicies, instanceTemplates (with region
               and global operations get), instanceGroupManagers insert/get/delete/list and
               listManagedInstances.
- `shared`     a slice's workload policy and content-addressed instance template: names,
               bodies, ensure (GET, 404 -> insert, waited for), and `sweep` of unused ones.
- `slices`     a MIG and its members -> ONE `ObservedNode` (workers by TPU worker id, the
               slice state table), the MIG's insert body, the provisioning check.
- `states`     the one table: `Instance.status` -> the core's `StateClass` and stuck rule.
- `convert`    instance JSON -> `tpucared.core.model` observations.
- `observe`    `observe_zone`: one paginated, owner-filtered instance list and one MIG
               list per (project, zone), never raising ApiError.
- `cloud`      `ComputeCloud`: the Cloud port over a `ComputeClient` (API name "compute").

Sources of every shape and code: docs/research/compute-engine.md.
"""

from tpucared.gcp.compute.client import ComputeClient
from tpucared.gcp.compute.cloud import ComputeCloud
from tpucared.gcp.compute.observe import observe_zone
from tpucared.gcp.compute.operation import Operation

__all__ = ["ComputeClient", "ComputeCloud", "Operation", "observe_zone"]
