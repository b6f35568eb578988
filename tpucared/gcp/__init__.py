"""The TPU v2 REST adapter: everything tpucared says to tpu.googleapis.com goes through here.

- `names`      resource names and the one place URLs' relative paths are spelled.
- `errors`     the single classification of every failure into an `ErrorKind` (`ApiError`).
- `retry`      bounded full-jitter retries of one request, honouring Retry-After.
- `auth`       token sources (none / ADC / key file) refreshed off the event loop.
- `operation`  the long-running `Operation` value.
- `bodies`     `NodeShape` (what a node is made of) and the request bodies built from it.
- `responses`  the response schema at the client's edge: what an answer must look like.
- `client`     `TpuClient`: one aiohttp session, one method per API call used.
- `queued`     its queuedResources.* calls (a mixin), one node or a multislice per request.
- `convert`    API JSON -> `tpucared.core.model` observations.
- `observe`    `observe_zone`: one paginated list per (project, zone), never raising ApiError.
"""

from tpucared.gcp.auth import (
    CredentialsError,
    GoogleTokenSource,
    NoAuth,
    TokenSource,
    load_token_source,
)
from tpucared.gcp.bodies import NodeShape
from tpucared.gcp.client import TpuClient
from tpucared.gcp.errors import ApiError, OperationTimeout
from tpucared.gcp.observe import observe_zone
from tpucared.gcp.operation import Operation
from tpucared.gcp.retry import RetryPolicy

__all__ = [
    "ApiError",
    "CredentialsError",
    "GoogleTokenSource",
    "NoAuth",
    "NodeShape",
    "Operation",
    "OperationTimeout",
    "RetryPolicy",
    "TokenSource",
    "TpuClient",
    "load_token_source",
    "observe_zone",
]
