"""The Compute Engine adapter: single-host TPU VMs as compute v1 instances, one per slot.

The Cloud port's second Google implementation (tpucared/ports/cloud.py), beside `gcp/tpu/`,
over the same request path (gcp/rest.py), error classification (gcp/errors.py), response
checks and field readers (gcp/responses.py, gcp/fields.py):

- `names`      compute v1 paths, built and taken apart in one place (an operation's path
               is the name the port hands out).
- `operation`  the zonal `Operation` value, its error classified by errors.py.
- `bodies`     the instances.insert body from a `NodeShape` (image, disk, network,
               scheduling per capacity tier, labels, metadata).
- `client`     `ComputeClient`: instances insert/list/get/delete/getGuestAttributes, zone
               operations get/wait/list.
- `states`     the one table: `Instance.status` -> the core's `StateClass` and stuck rule.
- `convert`    instance JSON -> `tpucared.core.model` observations.
- `observe`    `observe_zone`: one paginated, owner-filtered list per (project, zone),
               never raising ApiError.
- `cloud`      `ComputeCloud`: the Cloud port over a `ComputeClient` (API name "compute").

Sources of every shape and code: docs/research/compute-engine.md.
"""

from tpucared.gcp.compute.client import ComputeClient
from tpucared.gcp.compute.cloud import ComputeCloud
from tpucared.gcp.compute.observe import observe_zone
from tpucared.gcp.compute.operation import Operation

__all__ = ["ComputeClient", "ComputeCloud", "Operation", "observe_zone"]
