"""Google APIs over REST (aiohttp): what every Google cloud adapter of tpucared shares.

- `errors`     the single classification of every failure into an `ErrorKind`, for the TPU
               API and Compute Engine alike; `apierror` the `ApiError` it raises.
- `rest`       `RestClient`: the one request path (session, auth, retries, schema,
               classification, counting, list paging) every client below subclasses.
- `retry`      bounded full-jitter retries of one request, honouring Retry-After.
- `auth`       token sources (none / ADC / key file) refreshed off the event loop.
- `responses`  the response schema at a client's edge: what an answer must look like, and
               the list pages as last read (`PageMemo`).
- `tpu/`       the Cloud TPU API (tpu.googleapis.com v2, and OS Login): `TpuClient` and
               `TpuCloud`, its implementation of the Cloud port (tpucared/ports/cloud.py).

A second Google API (Compute Engine) gets a package of its own beside `tpu/`, over the same
auth, retries, classification and response checks.
"""

from tpucared.gcp.auth import (
    CredentialsError,
    GoogleTokenSource,
    NoAuth,
    TokenSource,
    load_token_source,
)
from tpucared.gcp.errors import ApiError, OperationTimeout
from tpucared.gcp.retry import RetryPolicy

__all__ = [
    "ApiError",
    "CredentialsError",
    "GoogleTokenSource",
    "NoAuth",
    "OperationTimeout",
    "RetryPolicy",
    "TokenSource",
    "load_token_source",
]
