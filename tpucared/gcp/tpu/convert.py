"""TPU v2 API JSON -> the domain's `ObservedNode` / `ObservedQueuedResource` (core.model).

Tolerant of what the API leaves out (proto3 JSON omits defaults, CREATING nodes have no
endpoints yet) and of enums sent as names or as numbers (the official client's int
encoding), strict about everything else: this is the response schema at the client's edge.

- A `state` we cannot read (a new enum name, an unknown number, a boolean, an object) maps to
  `NodeState.UNRECOGNIZED` with the value kept in `raw_state`: the zone is still observed,
  and the planner never acts on that node (it says so in a notice). It is not the API's own
  `UNKNOWN`, which is a state we understand. What each state means to the planner (its
  `StateClass`, its stuck rule) comes from states.py's one table.
- A field the planner relies on with the wrong type (a name that is not a string, labels
  that are not a map of strings, endpoints that are not a list of objects...) raises
  `MalformedResource` (a ValueError): the caller makes the whole zone unknown for the tick,
  never empty, because a node read wrong could look like "not ours" or "gone".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpucared.core.model.observed import (
    NodeMade,
    ObservedNode,
    ObservedQueuedResource,
    WorkerEndpoint,
)
from tpucared.gcp import maintenance
from tpucared.gcp.errors import classify_operation_error
from tpucared.gcp.fields import (
    MalformedResource,
    as_int,
    optional_str,
    parse_time,
    raw_excerpt,
    str_map,
)
from tpucared.gcp.tpu.names import short_name
from tpucared.gcp.tpu.states import NodeState, QueuedState, queued_fields, state_fields
from tpucared.ports.cloud import SOFTWARE_KEY

# The shared field readers (gcp/fields.py), importable from here as before.
__all__ = [
    "MalformedResource",
    "node_from_json",
    "parse_health",
    "parse_queued_state",
    "parse_state",
    "parse_time",
    "queued_resource_from_json",
    "raw_excerpt",
]

# Node.State numbers from cloud_tpu.proto (7 is unused there).
_STATE_BY_NUMBER: dict[int, NodeState] = {
    0: NodeState.STATE_UNSPECIFIED,
    1: NodeState.CREATING,
    2: NodeState.READY,
    3: NodeState.RESTARTING,
    4: NodeState.REIMAGING,
    5: NodeState.DELETING,
    6: NodeState.REPAIRING,
    8: NodeState.STOPPED,
    9: NodeState.STOPPING,
    10: NodeState.STARTING,
    11: NodeState.PREEMPTED,
    12: NodeState.TERMINATED,
    13: NodeState.HIDING,
    14: NodeState.HIDDEN,
    15: NodeState.UNHIDING,
    16: NodeState.UNKNOWN,
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


_STATE_BY_NAME: dict[str, NodeState] = {s.value: s for s in NodeState}


def parse_state(value: object) -> NodeState:
    """Node.State by name or number; UNRECOGNIZED for anything else (see the docstring)."""
    if isinstance(value, str) and value in _STATE_BY_NAME:
        state = _STATE_BY_NAME[value]  # the usual case, without the enum machinery
        return NodeState.UNRECOGNIZED if state is NodeState.UNRECOGNIZED else state
    number = as_int(value)
    if number is not None:
        return _STATE_BY_NUMBER.get(number, NodeState.UNRECOGNIZED)
    if value is None or value == "":
        return NodeState.STATE_UNSPECIFIED
    return NodeState.UNRECOGNIZED


def parse_queued_state(value: object) -> QueuedState:
    """A queued resource's state; unknown values read as STATE_UNSPECIFIED (there is no
    UNKNOWN in that enum), which the planner treats as "not settled yet"."""
    number = as_int(value)
    if number is not None:
        return _QUEUED_BY_NUMBER.get(number, QueuedState.STATE_UNSPECIFIED)
    try:
        return QueuedState(str(value))
    except ValueError:
        return QueuedState.STATE_UNSPECIFIED


def parse_health(value: object) -> str | None:
    number = as_int(value)
    if number is not None:
        return _HEALTH_BY_NUMBER.get(number, f"HEALTH_{number}")
    if not value or value == "HEALTH_UNSPECIFIED":
        return None
    return str(value)


def _endpoints(value: object) -> tuple[WorkerEndpoint, ...]:
    """networkEndpoints[i] is worker i; entries without an address yet are left out."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise MalformedResource(f"networkEndpoints is not a list: {raw_excerpt(value)}")
    endpoints = []
    for index, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise MalformedResource(f"networkEndpoints[{index}] is not an object")
        if not isinstance(entry.get("ipAddress"), str | None):
            raise MalformedResource(f"networkEndpoints[{index}].ipAddress is not a string")
        if not entry.get("ipAddress"):
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
    """An API Node as the planner sees it. Raises MalformedResource (a ValueError) for a node
    without a name or with a field of the wrong type."""
    name = data.get("name")
    if not isinstance(name, str) or not name.strip("/"):
        raise MalformedResource(f"node without a name in zone {zone}: {raw_excerpt(name)}")
    what = f"node {short_name(name)}"
    raw = data.get("state")
    state = parse_state(raw)
    health = data.get("health")
    if isinstance(health, bool) or not isinstance(health, str | int | None):
        raise MalformedResource(f"{what}: health is not an enum: {raw_excerpt(health)}")
    return ObservedNode(
        name=short_name(name),
        zone=zone,
        **state_fields(state),
        accelerator_type=optional_str(data, "acceleratorType", what) or "",
        labels=str_map(data.get("labels"), f"{what}: labels"),
        health=parse_health(health),
        cloud_id=optional_str(data, "id", what),
        create_time=parse_time(data.get("createTime")),
        extra=_software(optional_str(data, "runtimeVersion", what)),
        endpoints=_endpoints(data.get("networkEndpoints")),
        queued_resource=optional_str(data, "queuedResource", what),
        raw_state=raw_excerpt(raw) if state is NodeState.UNRECOGNIZED else None,
        made=_made(data, what),
        maintenance=maintenance.window(data.get("upcomingMaintenance"), what),
    )


def _software(version: str | None) -> Mapping[str, str]:
    """A node's runtime version as the port's `extra` holds it (ports/cloud.py)."""
    return {} if version is None else {SOFTWARE_KEY: version}


def _made(data: Mapping[str, Any], what: str) -> NodeMade:
    network = data.get("networkConfig")
    account = data.get("serviceAccount")
    tags = data.get("tags")
    if not isinstance(network, Mapping | None) or not isinstance(account, Mapping | None):
        raise MalformedResource(f"{what}: networkConfig or serviceAccount is not an object")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise MalformedResource(f"{what}: tags is not a list of strings: {raw_excerpt(tags)}")
    return NodeMade(
        network=optional_str(network or {}, "network", what),
        subnetwork=optional_str(network or {}, "subnetwork", what),
        service_account=optional_str(account or {}, "email", what),
        tags=tuple(tags or ()),
    )


# More slices than one request could ever hold: a count past it is a misread, not a request.
MAX_MULTISLICE_NODES = 4096


def _multislice_names(params: object, qr_name: str) -> list[str]:
    """The node ids of a multislice node spec: `{nodeIdPrefix}-0` .. `{prefix}-{nodeCount-1}`,
    the prefix defaulting to the queued resource's id. A count or prefix we cannot read is
    MalformedResource: the nodes it names would look like nobody's."""
    what = f"queued resource {short_name(qr_name)}: multisliceParams"
    if not isinstance(params, Mapping):
        raise MalformedResource(f"{what} is not an object: {raw_excerpt(params)}")
    count = as_int(params.get("nodeCount"))
    if count is None or not 0 < count <= MAX_MULTISLICE_NODES:
        raise MalformedResource(f"{what}.nodeCount is unreadable: {raw_excerpt(params)}")
    prefix = optional_str(params, "nodeIdPrefix", what) or short_name(qr_name)
    return [f"{prefix}-{i}" for i in range(count)]


def queued_resource_from_json(zone: str, data: Mapping[str, Any]) -> ObservedQueuedResource:
    """An API QueuedResource as the planner sees it. A queued resource has no labels of its
    own: `labels` merges those of its node specs' nodes, where our ownership labels go.
    `node_names`: each node spec's `nodeId`, or the `{prefix}-{i}` ids of its
    `multisliceParams`. Raises ValueError for one without a name."""
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
            labels.update(str_map(node.get("labels"), f"queued resource {name}: labels"))
        if spec.get("nodeId"):
            node_names.append(str(spec["nodeId"]))
        elif spec.get("multisliceParams") is not None:
            node_names.extend(_multislice_names(spec["multisliceParams"], name))
    error = None
    failed = state_data.get("failedData")
    if isinstance(failed, Mapping) and isinstance(failed.get("error"), Mapping):
        error = classify_operation_error(failed["error"], operation=name)
    return ObservedQueuedResource(
        name=short_name(name),
        zone=zone,
        **queued_fields(state),
        labels=labels,
        node_names=tuple(node_names),
        create_time=parse_time(data.get("createTime")),
        error=error.kind if error is not None else None,
        error_message=error.message if error is not None else None,
    )
