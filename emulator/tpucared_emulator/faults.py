"""Fault injection for the v2 API: errors, latency, dropped connections and hostile answers.

Configured through `PUT /_emulator/v1/faults`:
    {"error_rate": 0.1, "latency_ms": 50, "kinds": ["unavailable", ...], "retry_after_s": 1,
     "seed": 7, "paths": ["nodes"], "methods": ["POST"],
     "script": [{"kind": "unavailable"}, {"kind": "ok"}, {"kind": "rate_limited",
                 "retry_after_s": 1}, {"kind": "internal", "after": true},
                {"kind": "malformed", "mode": "state", "value": "SOMETHING_NEW"}]}
Only /v2 requests whose path contains one of `paths` (and whose method is in `methods`, when
given) are affected; /_emulator never is. Each matching request first consumes the next script
entry, if any ("ok" lets it through); once the script is used up, it fails with probability
`error_rate`, with a kind drawn from `kinds`. An entry with `"after": true` lets the request
take effect and then loses the response (the case that tests idempotent retries).

The kind `malformed` is an API that answers, but not with anything a client should act on;
its `mode` (one of `MALFORMED_MODES`, rendered by hostile.py) says how, `value` is the state
the `state` mode puts on every node and `delay_s` the stall of `slow_headers`. A script entry
carries its own; random `malformed` faults use the top-level `mode`, `value` and `delay_s`.

`FaultInjector` only decides; the request pipeline (middleware.py) applies the decision.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from tpucared_emulator import errors
from tpucared_emulator.errors import ApiError

FAULT_KINDS = (
    "unavailable",  # 503 UNAVAILABLE
    "internal",  # 500 INTERNAL
    "deadline",  # 504 DEADLINE_EXCEEDED
    "quota",  # 429 RESOURCE_EXHAUSTED with a google.rpc.QuotaFailure
    "rate_limited",  # 429 RESOURCE_EXHAUSTED without one, Retry-After + RetryInfo
    "conflict",  # 409 ABORTED "unable to queue the operation"
    "permission",  # 403 PERMISSION_DENIED "Permission 'tpu.nodes.list' denied on ..."
    "drop",  # the TCP connection is closed without a response
    "malformed",  # an answer no client should act on, per `mode` (hostile.py)
)
MALFORMED_MODES = (
    "not_json",  # 200, an HTML page
    "deep_json",  # 200, ~10 KB of JSON nested past any parser's recursion limit
    "error_envelope",  # 200 carrying {"error": {"code": 503, ...}}
    "redirect",  # 302 to another host
    "labels_list",  # node lists: every node's labels as ["k=v", ...]
    "state",  # node lists: every node's state replaced by `value`
    "duplicate",  # node lists: the first node listed again, the copy PREEMPTED
    "endless_pages",  # lists: the first page, with a fresh nextPageToken every time
    "slow_headers",  # nothing at all for `delay_s` seconds, then the real answer
)
DEFAULT_RANDOM_KINDS = ("unavailable", "internal", "rate_limited")


@dataclass(frozen=True)
class Fault:
    kind: str
    retry_after_s: float | None = None
    after: bool = False  # apply after the request took effect
    latency_ms: float = 0.0
    mode: str | None = None  # kind "malformed" only
    value: Any = None  # mode "state": the JSON value every node's state becomes
    delay_s: float | None = None  # mode "slow_headers": how long to send nothing


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


def _malformed(payload: dict[str, Any], where: str, kind: str | None) -> dict[str, Any]:
    """`mode`, `value` and `delay_s` of a malformed fault, checked; `where` prefixes the field
    names in errors ("" at the top level, "script[2]." in a script entry)."""
    fields = {"mode", "value", "delay_s"} & set(payload)
    if kind != "malformed":
        if fields:
            raise errors.invalid_argument(
                f"{sorted(fields)} only apply to kind 'malformed'", where + sorted(fields)[0]
            )
        return {}
    mode = payload.get("mode")
    if mode not in MALFORMED_MODES:
        raise errors.invalid_argument(
            f"unknown malformed mode {mode!r}; one of {MALFORMED_MODES}", where + "mode"
        )
    delay = payload.get("delay_s")
    if (delay is not None or mode == "slow_headers") and (
        not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0
    ):
        raise errors.invalid_argument("delay_s must be a number >= 0", where + "delay_s")
    if mode == "state" and "value" not in payload:
        raise errors.invalid_argument("state needs value, any JSON value", where + "value")
    return {
        "mode": mode,
        "value": payload.get("value"),
        "delay_s": float(delay) if isinstance(delay, int | float) else None,
    }


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
        self.malformed: dict[str, Any] = {}  # mode, value, delay_s of random malformed faults
        self._rng = random.Random()

    def configure(self, payload: object) -> None:
        """Replace the whole configuration (an empty object turns faults off)."""
        if not isinstance(payload, dict):
            raise errors.invalid_argument("the fault configuration must be a JSON object")
        known = {"error_rate", "latency_ms", "kinds", "retry_after_s", "seed", "paths"}
        unknown = set(payload) - known - {"methods", "script", "mode", "value", "delay_s"}
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
                **_malformed(entry, f"script[{i}].", entry.get("kind")),
            )
            for i, entry in enumerate(script)
        )
        random_kinds = tuple(_kind(k, allow_ok=False) for k in kinds)
        random_malformed = "malformed" in random_kinds
        if not random_malformed and {"mode", "value", "delay_s"} & set(payload):
            raise errors.invalid_argument(
                "mode, value and delay_s (top level) need 'malformed' in kinds", "kinds"
            )
        malformed = _malformed(payload, "", "malformed" if random_malformed else None)
        self.clear()
        self.error_rate = rate
        self.latency_ms = _number(payload, "latency_ms", 0.0) or 0.0
        self.kinds = random_kinds
        self.malformed = malformed
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
            **self.malformed,
            "script_remaining": [_entry_json(f) for f in self.script],
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
            kind = self._rng.choice(self.kinds)
            extra = self.malformed if kind == "malformed" else {}
            return latency / 1000, Fault(kind, self.retry_after_s, **extra)
        return latency / 1000, None


def _entry_json(fault: Fault) -> dict[str, Any]:
    entry = {"kind": fault.kind, "retry_after_s": fault.retry_after_s, "after": fault.after}
    if fault.kind == "malformed":
        entry.update(mode=fault.mode, value=fault.value, delay_s=fault.delay_s)
    return entry


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
