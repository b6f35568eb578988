"""Request bodies for nodes.create and queuedResources.create, as plain JSON dicts.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tpucared.core.model.specs import CapacityKind
from tpucared.gcp import names

DEFAULT_SA_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


def scheduling_config(capacity: CapacityKind) -> dict[str, bool]:
    """Node.schedulingConfig for a direct create."""
    if capacity is CapacityKind.SPOT:
        return {"spot": True}
    if capacity is CapacityKind.PREEMPTIBLE:
        return {"preemptible": True}
    if capacity is CapacityKind.RESERVED:
        return {"reserved": True}
    return {}


def node_body(
    *,
    accelerator_type: str,
    runtime_version: str,
    capacity: CapacityKind | None = None,
    labels: Mapping[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
    tags: Sequence[str] = (),
    enable_external_ips: bool = True,
    network: str | None = None,
    subnetwork: str | None = None,
    service_account: str | None = None,
    service_account_scopes: Sequence[str] = DEFAULT_SA_SCOPES,
    description: str | None = None,
) -> dict[str, Any]:
    """A Node resource for nodes.create (capacity set) or a queued node spec (capacity None)."""
    if not accelerator_type or not runtime_version:
        raise ValueError("accelerator_type and runtime_version are required")
    network_config: dict[str, Any] = {"enableExternalIps": enable_external_ips}
    if network:
        network_config["network"] = network
    if subnetwork:
        network_config["subnetwork"] = subnetwork
    body: dict[str, Any] = {
        "acceleratorType": accelerator_type,
        "runtimeVersion": runtime_version,
        "networkConfig": network_config,
    }
    if capacity is not None and (config := scheduling_config(capacity)):
        body["schedulingConfig"] = config
    if labels:
        body["labels"] = dict(labels)
    if metadata:
        body["metadata"] = dict(metadata)
    if tags:
        body["tags"] = list(tags)
    if service_account:
        body["serviceAccount"] = {"email": service_account, "scope": list(service_account_scopes)}
    if description:
        body["description"] = description
    return body


def duration(seconds: float) -> str:
    """google.protobuf.Duration in JSON form: 3600 -> "3600s"."""
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


def queued_resource_body(
    project: str,
    zone: str,
    *,
    node_id: str,
    node: Mapping[str, Any],
    capacity: CapacityKind,
    reservation_name: str | None = None,
    valid_until_seconds: float | None = None,
) -> dict[str, Any]:
    """A QueuedResource for one node. `node` is a `node_body(..., capacity=None)`."""
    if capacity is CapacityKind.PREEMPTIBLE:
        raise ValueError("queued resources have no preemptible tier: use spot or on-demand")
    body: dict[str, Any] = {
        "tpu": {
            "nodeSpec": [
                {"parent": names.location(project, zone), "nodeId": node_id, "node": dict(node)}
            ]
        }
    }
    if capacity is CapacityKind.SPOT:
        body["spot"] = {}
    elif capacity is CapacityKind.RESERVED:
        body["reservationName"] = reservation_name or names.reservation_wildcard(project, zone)
    if valid_until_seconds is not None:
        body["queueingPolicy"] = {"validUntilDuration": duration(valid_until_seconds)}
    return body
