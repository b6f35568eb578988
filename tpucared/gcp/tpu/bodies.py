"""Request bodies for nodes.create and queuedResources.create, as plain JSON dicts.

`NodeShape` (the Cloud port's, tpucared/ports/cloud.py) is everything a node is created with
besides its name and place: one value that the runtime builds (runtime/nodes/calls.py) and
that travels unchanged through `TpuCloud.create` and `TpuClient.create_node` /
`create_queued_resource` to `node_body`, instead of a dozen keyword arguments threaded
through three layers.

Pure functions, so the exact JSON we send is testable without a server. Choices that differ
from the API's defaults, on purpose:

- `networkConfig.enableExternalIps` is sent explicitly, true unless asked otherwise: the API
  default is false (gcloud sends true unless --internal-ips) and a create that forgets it gets
  workers nobody outside the VPC can SSH into.
- Capacity for nodes.create goes into `schedulingConfig` (spot / preemptible / reserved;
  on-demand sends none).
- Capacity for queuedResources.create follows gcloud's v2 command: spot is the `spot: {}`
  tier, reserved is `reservationName: projects/P/locations/Z/reservations/-` (any reservation
  of the project), on-demand sends no tier, and the node spec carries no schedulingConfig.
  Queued resources have no preemptible tier, so that combination is refused here.
- A queued resource's node spec names one node (`nodeId`) or, multislice, several
  (`multisliceParams {nodeCount, nodeIdPrefix}`, nodes `{prefix}-0` ..): never both, as the
  API's oneof requires.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpucared.core.model.specs import CapacityKind, DiskMode
from tpucared.gcp.tpu import names
from tpucared.ports.cloud import DEFAULT_SA_SCOPES, NodeShape

__all__ = ["DEFAULT_SA_SCOPES", "NodeShape", "node_body", "queued_resource_body"]


def scheduling_config(capacity: CapacityKind) -> dict[str, bool]:
    """Node.schedulingConfig for a direct create."""
    if capacity is CapacityKind.SPOT:
        return {"spot": True}
    if capacity is CapacityKind.PREEMPTIBLE:
        return {"preemptible": True}
    if capacity is CapacityKind.RESERVED:
        return {"reserved": True}
    return {}


def node_body(shape: NodeShape) -> dict[str, Any]:
    """A Node resource for nodes.create (capacity set) or a queued node spec (capacity None)."""
    if not shape.accelerator_type or not shape.software:
        raise ValueError("accelerator_type and runtime_version are required")
    network_config: dict[str, Any] = {"enableExternalIps": shape.enable_external_ips}
    if shape.network:
        network_config["network"] = shape.network
    if shape.subnetwork:
        network_config["subnetwork"] = shape.subnetwork
    body: dict[str, Any] = {
        "acceleratorType": shape.accelerator_type,
        "runtimeVersion": shape.software,
        "networkConfig": network_config,
    }
    if shape.capacity is not None and (config := scheduling_config(shape.capacity)):
        body["schedulingConfig"] = config
    if shape.labels:
        body["labels"] = dict(shape.labels)
    if shape.metadata:
        body["metadata"] = dict(shape.metadata)
    if shape.tags:
        body["tags"] = list(shape.tags)
    if shape.service_account:
        body["serviceAccount"] = {
            "email": shape.service_account,
            "scope": list(shape.service_account_scopes),
        }
    if shape.data_disks:
        body["dataDisks"] = [
            {"sourceDisk": d.source, "mode": _DISK_MODES[d.mode]} for d in shape.data_disks
        ]
    if shape.description:
        body["description"] = shape.description
    return body


_DISK_MODES = {DiskMode.READ_WRITE: "READ_WRITE", DiskMode.READ_ONLY: "READ_ONLY"}


def duration(seconds: float) -> str:
    """google.protobuf.Duration in JSON form: 3600 -> "3600s"."""
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


def name_strategy(
    node_id: str | None, multislice_count: int | None, node_id_prefix: str | None
) -> dict[str, Any]:
    """A node spec's oneof `name_strategy`: `{"nodeId": ...}` for one node, or
    `{"multisliceParams": {"nodeCount", "nodeIdPrefix"}}` for `multislice_count` nodes named
    `{prefix}-0` .. (the API's default prefix is the queued resource id)."""
    if multislice_count is None:
        if node_id_prefix is not None:
            raise ValueError("node_id_prefix goes with multislice_count")
        if not node_id:
            raise ValueError(
                "a queued resource needs node_id (one node) or multislice_count (several)"
            )
        return {"nodeId": node_id}
    if node_id is not None:
        raise ValueError(
            "pass node_id for one node or multislice_count for several, not both "
            "(the API's nodeId and multisliceParams are a oneof)"
        )
    if isinstance(multislice_count, bool) or not isinstance(multislice_count, int):
        raise ValueError(f"multislice_count must be an int, got {multislice_count!r}")
    if multislice_count < 2:
        raise ValueError(
            f"multislice_count must be > 1 (MultisliceParams.nodeCount), got {multislice_count}"
        )
    params: dict[str, Any] = {"nodeCount": multislice_count}
    if node_id_prefix is not None:
        if not node_id_prefix:
            raise ValueError("node_id_prefix must not be empty (leave it None for the default)")
        params["nodeIdPrefix"] = node_id_prefix
    return {"multisliceParams": params}


def queued_resource_body(
    project: str,
    zone: str,
    *,
    node: Mapping[str, Any],
    capacity: CapacityKind,
    node_id: str | None = None,
    reservation_name: str | None = None,
    valid_until_seconds: float | None = None,
    multislice_count: int | None = None,
    node_id_prefix: str | None = None,
) -> dict[str, Any]:
    """A QueuedResource for one node (`node_id`) or, multislice, `multislice_count` nodes of
    the same spec (see `name_strategy`). `node` is a `node_body(..., capacity=None)`."""
    if capacity is CapacityKind.PREEMPTIBLE:
        raise ValueError("queued resources have no preemptible tier: use spot or on-demand")
    node_spec: dict[str, Any] = {
        "parent": names.location(project, zone),
        **name_strategy(node_id, multislice_count, node_id_prefix),
        "node": dict(node),
    }
    body: dict[str, Any] = {"tpu": {"nodeSpec": [node_spec]}}
    if capacity is CapacityKind.SPOT:
        body["spot"] = {}
    elif capacity is CapacityKind.RESERVED:
        body["reservationName"] = reservation_name or names.reservation_wildcard(project, zone)
    if valid_until_seconds is not None:
        body["queueingPolicy"] = {"validUntilDuration": duration(valid_until_seconds)}
    return body
