"""TPU v2 API JSON -> the domain's `ObservedNode` / `ObservedQueuedResource` (core.model).

Tolerant of what the API leaves out (proto3 JSON omits defaults, CREATING nodes have no
endpoints yet) and of enums sent as names or as numbers (the official client's int
encoding). Unknown enum values map to `CloudState.UNKNOWN` instead of failing, so a new state
Google adds never stops a zone from being observed. Only a node without a name is refused
(ValueError): without it there is nothing to reconcile against.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tpucared.core.model.observed import (
    CloudState,
    ObservedNode,
    ObservedQueuedResource,
    QueuedState,
    WorkerEndpoint,
)
from tpucared.gcp.errors import classify_operation_error
from tpucared.gcp.names import short_name

# Node.State numbers from cloud_tpu.proto (7 is unused there).
_STATE_BY_NUMBER: dict[int, CloudState] = {
    0: CloudState.STATE_UNSPECIFIED,
    1: CloudState.CREATING,
    2: CloudState.READY,
    3: CloudState.RESTARTING,
    4: CloudState.REIMAGING,
    5: CloudState.DELETING,
    6: CloudState.REPAIRING,
    8: CloudState.STOPPED,
    9: CloudState.STOPPING,
    10: CloudState.STARTING,
    11: CloudState.PREEMPTED,
    12: CloudState.TERMINATED,
    13: CloudState.HIDING,
    14: CloudState.HIDDEN,
    15: CloudState.UNHIDING,
    16: CloudState.UNKNOWN,
}

# QueuedResourceState.State numbers from cloud_tpu.proto.
_QUEUED_BY_NUMBER: dict[int, QueuedState] = {
    0: QueuedState.STATE_UNSPECIFIED,
    1: QueuedState.CREATING,
    2: QueuedState.ACCEPTED,
    3: QueuedState.PROVISIONING,
    4: QueuedState.FAILED,
    5: QueuedState.DELETING,
    6: QueuedState.ACTIVE,
    7: QueuedState.SUSPENDING,
    8: QueuedState.SUSPENDED,
    9: QueuedState.WAITING_FOR_RESOURCES,
}

# Node.Health numbers (2 is unused). HEALTH_UNSPECIFIED is what an absent field means in
# proto3 JSON, so both read as None.
_HEALTH_BY_NUMBER: dict[int, str | None] = {
    0: None,
    1: "HEALTHY",
    3: "TIMEOUT",
    4: "UNHEALTHY_TENSORFLOW",
    5: "UNHEALTHY_MAINTENANCE",
}


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


_STATE_BY_NAME: dict[str, CloudState] = {s.value: s for s in CloudState}


def parse_state(value: object) -> CloudState:
    if isinstance(value, str) and value in _STATE_BY_NAME:
        return _STATE_BY_NAME[value]  # the usual case, without the enum machinery
    number = _as_int(value)
    if number is not None:
        return _STATE_BY_NUMBER.get(number, CloudState.UNKNOWN)
    if value is None or value == "":
        return CloudState.STATE_UNSPECIFIED
    try:
        return CloudState(str(value))
    except ValueError:
        return CloudState.UNKNOWN


def parse_queued_state(value: object) -> QueuedState:
    """A queued resource's state; unknown values read as STATE_UNSPECIFIED (there is no
    UNKNOWN in that enum), which the planner treats as "not settled yet"."""
    number = _as_int(value)
    if number is not None:
        return _QUEUED_BY_NUMBER.get(number, QueuedState.STATE_UNSPECIFIED)
    try:
        return QueuedState(str(value))
    except ValueError:
        return QueuedState.STATE_UNSPECIFIED


def parse_health(value: object) -> str | None:
    number = _as_int(value)
    if number is not None:
        return _HEALTH_BY_NUMBER.get(number, f"HEALTH_{number}")
    if not value or value == "HEALTH_UNSPECIFIED":
        return None
    return str(value)


def parse_time(value: object) -> datetime | None:
    """RFC 3339 (with Z, offsets, up to nanoseconds) -> aware UTC datetime; None if absent."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)  # the API always sends UTC
    return parsed.astimezone(UTC)


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _endpoints(value: object) -> tuple[WorkerEndpoint, ...]:
    """networkEndpoints[i] is worker i; entries without an address yet are left out."""
    if not isinstance(value, list):
        return ()
    endpoints = []
    for index, entry in enumerate(value):
        if not isinstance(entry, Mapping) or not entry.get("ipAddress"):
            continue
        access = entry.get("accessConfig")
        external = access.get("externalIp") if isinstance(access, Mapping) else None
        endpoints.append(
            WorkerEndpoint(
                index=index,
                internal_ip=str(entry["ipAddress"]),
                external_ip=str(external) if external else None,
            )
        )
    return tuple(endpoints)


def node_from_json(zone: str, data: Mapping[str, Any]) -> ObservedNode:
    """An API Node as the planner sees it. Raises ValueError for a node without a name."""
    name = data.get("name")
    if not isinstance(name, str) or not name.strip("/"):
        raise ValueError(f"node without a name in zone {zone}")
    cloud_id = data.get("id")
    runtime = data.get("runtimeVersion")
    queued = data.get("queuedResource")
    return ObservedNode(
        name=short_name(name),
        zone=zone,
        state=parse_state(data.get("state")),
        accelerator_type=str(data.get("acceleratorType") or ""),
        labels=_str_map(data.get("labels")),
        health=parse_health(data.get("health")),
        cloud_id=str(cloud_id) if cloud_id not in (None, "") else None,
        create_time=parse_time(data.get("createTime")),
        runtime_version=str(runtime) if runtime else None,
        endpoints=_endpoints(data.get("networkEndpoints")),
        queued_resource=str(queued) if queued else None,
    )


def queued_resource_from_json(zone: str, data: Mapping[str, Any]) -> ObservedQueuedResource:
    """An API QueuedResource as the planner sees it. A queued resource has no labels of its
    own: `labels` merges those of its node specs' nodes, where our ownership labels go.
    Raises ValueError for one without a name."""
    name = data.get("name")
    if not isinstance(name, str) or not name.strip("/"):
        raise ValueError(f"queued resource without a name in zone {zone}")
    state_obj = data.get("state")
    # QueuedResourceState is an object {state, stateInitiator, failedData, ...}.
    state_data: Mapping[str, Any] = state_obj if isinstance(state_obj, Mapping) else {}
    state = parse_queued_state(state_data.get("state") if state_data else state_obj)
    tpu = data.get("tpu")
    specs = tpu.get("nodeSpec") if isinstance(tpu, Mapping) else None
    labels: dict[str, str] = {}
    node_names: list[str] = []
    for spec in specs if isinstance(specs, list) else []:
        if not isinstance(spec, Mapping):
            continue
        node = spec.get("node")
        if isinstance(node, Mapping):
            labels.update(_str_map(node.get("labels")))
        if spec.get("nodeId"):
            node_names.append(str(spec["nodeId"]))
    error = None
    failed = state_data.get("failedData")
    if isinstance(failed, Mapping) and isinstance(failed.get("error"), Mapping):
        error = classify_operation_error(failed["error"], operation=name)
    return ObservedQueuedResource(
        name=short_name(name),
        zone=zone,
        state=state,
        labels=labels,
        node_names=tuple(node_names),
        create_time=parse_time(data.get("createTime")),
        error=error.kind if error is not None else None,
        error_message=error.message if error is not None else None,
    )
