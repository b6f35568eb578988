"""Fault injection for the v2 API: errors, latency and dropped connections, random or scripted.

Configured through `PUT /_emulator/v1/faults`:
    {"error_rate": 0.1, "latency_ms": 50, "kinds": ["unavailable", ...], "retry_after_s": 1,
     "seed": 7, "paths": ["nodes"], "methods": ["POST"],
     "script": [{"kind": "unavailable"}, {"kind": "ok"}, {"kind": "rate_limited",
                 "retry_after_s": 1}, {"kind": "internal", "after": true}]}
Only /v2 requests whose path contains one of `paths` (and whose method is in `methods`, when
given) are affected; /_emulator never is. Each matching request first consumes the next script
entry, if any ("ok" lets it through); once the script is used up, it fails with probability
`error_rate`, with a kind drawn from `kinds`. An entry with `"after": true` lets the request
take effect and then loses the response (the case that tests idempotent retries).

`FaultInjector` only decides; the request pipeline (middleware.py) applies the decision.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from tpucared.emulator import errors
from tpucared.emulator.errors import ApiError

FAULT_KINDS = (
    "unavailable",  # 503 UNAVAILABLE
    "internal",  # 500 INTERNAL
    "deadline",  # 504 DEADLINE_EXCEEDED
    "quota",  # 429 RESOURCE_EXHAUSTED with a google.rpc.QuotaFailure
    "rate_limited",  # 429 RESOURCE_EXHAUSTED without one, Retry-After + RetryInfo
    "conflict",  # 409 ABORTED "unable to queue the operation"
    "permission",  # 403 PERMISSION_DENIED "Permission 'tpu.nodes.list' denied on ..."
    "drop",  # the TCP connection is closed without a response
)
DEFAULT_RANDOM_KINDS = ("unavailable", "internal", "rate_limited")


@dataclass(frozen=True)
class Fault:
    kind: str
    retry_after_s: float | None = None
    after: bool = False  # apply after the request took effect
    latency_ms: float = 0.0


def _number(payload: dict[str, Any], key: str, default: float | None) -> float | None:
    value = payload.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise errors.invalid_argument(f"{key} must be a number >= 0", field=key)
    return float(value)


def _strings(payload: dict[str, Any], key: str) -> tuple[str, ...] | None:
    value = payload.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.invalid_argument(f"{key} must be a string or a list of strings", field=key)
    return tuple(value)


def _kind(value: object, allow_ok: bool) -> str:
    allowed = (*FAULT_KINDS, "ok") if allow_ok else FAULT_KINDS
    if value not in allowed:
        raise errors.invalid_argument(f"unknown fault kind {value!r}; one of {allowed}", "kind")
    return str(value)


class FaultInjector:
    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.error_rate = 0.0
        self.latency_ms = 0.0
        self.kinds: tuple[str, ...] = DEFAULT_RANDOM_KINDS
        self.retry_after_s: float | None = None
        self.seed: int | None = None
        self.paths: tuple[str, ...] | None = None
        self.methods: tuple[str, ...] | None = None
        self.script: deque[Fault] = deque()
        self._rng = random.Random()

    def configure(self, payload: object) -> None:
        """Replace the whole configuration (an empty object turns faults off)."""
        if not isinstance(payload, dict):
            raise errors.invalid_argument("the fault configuration must be a JSON object")
        known = {"error_rate", "latency_ms", "kinds", "retry_after_s", "seed", "paths"}
        unknown = set(payload) - known - {"methods", "script"}
        if unknown:
            raise errors.invalid_argument(f"unknown fault fields: {sorted(unknown)}")
        rate = _number(payload, "error_rate", 0.0) or 0.0
        if rate > 1:
            raise errors.invalid_argument("error_rate must be between 0 and 1", "error_rate")
        kinds = _strings(payload, "kinds") or DEFAULT_RANDOM_KINDS
        script = payload.get("script", [])
        if not isinstance(script, list) or not all(isinstance(e, dict) for e in script):
            raise errors.invalid_argument("script must be a list of objects", field="script")
        seed = payload.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise errors.invalid_argument("seed must be an integer", field="seed")
        default_retry = _number(payload, "retry_after_s", None)
        entries = deque(
            Fault(
                kind=_kind(entry.get("kind"), allow_ok=True),
                retry_after_s=_number(entry, "retry_after_s", default_retry),
                after=bool(entry.get("after", False)),
                latency_ms=_number(entry, "latency_ms", 0.0) or 0.0,
            )
            for entry in script
        )
        self.clear()
        self.error_rate = rate
        self.latency_ms = _number(payload, "latency_ms", 0.0) or 0.0
        self.kinds = tuple(_kind(k, allow_ok=False) for k in kinds)
        self.retry_after_s = default_retry
        self.seed = seed
        self.paths = _strings(payload, "paths")
        methods = _strings(payload, "methods")
        self.methods = tuple(m.upper() for m in methods) if methods else None
        self.script = entries
        self._rng = random.Random(seed)

    def to_json(self) -> dict[str, Any]:
        return {
            "error_rate": self.error_rate,
            "latency_ms": self.latency_ms,
            "kinds": list(self.kinds),
            "retry_after_s": self.retry_after_s,
            "seed": self.seed,
            "paths": list(self.paths) if self.paths is not None else None,
            "methods": list(self.methods) if self.methods is not None else None,
            "script_remaining": [
                {"kind": f.kind, "retry_after_s": f.retry_after_s, "after": f.after}
                for f in self.script
            ],
        }

    def matches(self, method: str, path: str) -> bool:
        if self.methods is not None and method.upper() not in self.methods:
            return False
        return self.paths is None or any(p in path for p in self.paths)

    def decide(self, method: str, path: str) -> tuple[float, Fault | None]:
        """(extra latency in seconds, fault to apply or None) for one /v2 request."""
        if not self.matches(method, path):
            return 0.0, None
        latency = self.latency_ms
        if self.script:
            entry = self.script.popleft()
            latency += entry.latency_ms
            return latency / 1000, None if entry.kind == "ok" else entry
        if self.error_rate and self._rng.random() < self.error_rate:
            return latency / 1000, Fault(self._rng.choice(self.kinds), self.retry_after_s)
        return latency / 1000, None


def fault_error(fault: Fault, method: str, path: str) -> ApiError:
    """The error response a (non-drop) fault produces for a request."""
    if fault.kind == "unavailable":
        return errors.unavailable()
    if fault.kind == "internal":
        return errors.internal()
    if fault.kind == "deadline":
        return errors.deadline_exceeded()
    if fault.kind == "quota":
        return errors.quota_exhausted(_region(path))
    if fault.kind == "rate_limited":
        return errors.rate_limited(fault.retry_after_s)
    if fault.kind == "conflict":
        return errors.unable_to_queue()
    if fault.kind == "permission":
        return errors.permission_denied(permission_for(method, path), _resource(path))
    raise ValueError(f"fault {fault.kind!r} has no error response")


def _resource(path: str) -> str:
    return path.removeprefix("/v2/").split(":", 1)[0]


def _region(path: str) -> str:
    parts = _resource(path).split("/")
    zone = parts[3] if len(parts) > 3 and parts[2] == "locations" else "us-central1-a"
    return zone.rsplit("-", 1)[0]


_COLLECTIONS = {
    "nodes": "nodes",
    "operations": "operations",
    "queuedResources": "queuedResources",
    "acceleratorTypes": "acceleratortypes",
    "runtimeVersions": "runtimeversions",
    "locations": "locations",
}


def permission_for(method: str, path: str) -> str:
    """The IAM permission a request needs, e.g. `tpu.nodes.list` (for 403 messages)."""
    resource, _, verb = path.removeprefix("/v2/").partition(":")
    parts = resource.split("/")
    # Names alternate collection/id: projects/p/locations/z/nodes/n.
    collection = next(
        (_COLLECTIONS[p] for p in reversed(parts[0::2]) if p in _COLLECTIONS), "locations"
    )
    is_collection = len(parts) % 2 == 1
    if verb:
        action = {"getGuestAttributes": "get"}.get(verb, verb)
    elif is_collection:
        action = "create" if method == "POST" else "list"
    else:
        action = {"GET": "get", "DELETE": "delete", "PATCH": "update"}.get(method, "get")
    return f"tpu.{collection}.{action}"
