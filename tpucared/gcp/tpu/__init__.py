"""The Cloud TPU API adapter: everything tpucared says to tpu.googleapis.com goes through here.

One implementation of the Cloud port (tpucared/ports/cloud.py), over the shared Google pieces
of tpucared/gcp (the request path rest.py, auth, retries, error classification, response
checks, field readers), which Compute Engine's adapter (gcp/compute/) shares:

- `names`      resource names and the one place URLs' relative paths are spelled.
- `operation`  the long-running `Operation` value.
- `bodies`     `NodeShape` (what a node is made of) and the request bodies built from it.
- `client`     `TpuClient`: a `RestClient`, one method per API call used.
- `queued`     its queuedResources.* calls (a mixin), one node or a multislice per request.
- `states`     the one table: `Node.State` -> the core's `StateClass` and stuck-timeout rule.
- `convert`    API JSON -> `tpucared.core.model` observations.
- `observe`    `observe_zone`: one paginated list per (project, zone), never raising ApiError.
- `oslogin`    `OsLoginClient`: the OS Login v1 calls, on a client's request path (also
               Compute Engine's).
- `cloud`      `TpuCloud`: the Cloud port over a `TpuClient` (what the runtime holds).
"""

from tpucared.gcp.tpu.bodies import NodeShape
from tpucared.gcp.tpu.client import TpuClient
from tpucared.gcp.tpu.cloud import TpuCloud
from tpucared.gcp.tpu.observe import observe_zone
from tpucared.gcp.tpu.operation import Operation

__all__ = ["NodeShape", "Operation", "TpuClient", "TpuCloud", "observe_zone"]
