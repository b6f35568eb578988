"""Compute Engine v1 JSON -> the domain's `ObservedNode` (core.model).

One instance is one node with one worker (a single-host TPU VM). Tolerant of what the API
leaves out (a PROVISIONING instance has no address yet, an empty map may be omitted), strict
about everything else, as tpu/convert.py is (the readers are gcp/fields.py's):

- A `status` we cannot read maps to `InstanceStatus.UNRECOGNIZED` (UNREADABLE, never acted
  on) with the value kept in `raw_state`; what each status means comes from states.py.
- A field the planner relies on with the wrong type (a name that is not a string, labels
  that are not a map of strings, network interfaces that are not a list of objects...)
  raises `MalformedResource`: the caller makes the whole zone unknown for the tick.
- The worker's addresses: `networkInterfaces[0].networkIP` (internal) and its first access
  config's `natIP` (external, when it has one).
- A flex-start VM's `resourceStatus.scheduling.terminationTimestamp` (RFC 3339, output
  only, set once it runs: start + maxRunDuration) is `run_ends_at`, when the cloud ends the
  run by itself (compute/docs/instances/limit-vm-runtime; `ResourceStatusScheduling` in
  google-cloud-compute). `scheduling.terminationTime` is never read: it is an input, the
  alternative to maxRunDuration, and not where Google reports the end (issue 39).
- `resourceStatus.upcomingMaintenance` (google-cloud-compute `ResourceStatus`,
  `UpcomingMaintenance`) is `maintenance`, the next host-maintenance window (gcp/maintenance.py).
- `accelerator_type` is the machine type's short name (`tpu7x-standard-4t`), the name the
  fleet asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tpucared.core.model.observed import MaintenanceWindow, NodeMade, ObservedNode, WorkerEndpoint
from tpucared.gcp import maintenance
from tpucared.gcp.compute.names import short_name
from tpucared.gcp.compute.states import InstanceStatus, parse_status, state_fields
from tpucared.gcp.fields import (
    MalformedResource,
    optional_str,
    parse_time,
    raw_excerpt,
    str_map,
)


def _objects(value: object, what: str) -> list[Mapping[str, Any]]:
    """A list of objects; absent is empty."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise MalformedResource(f"{what} is not a list of objects: {raw_excerpt(value)}")
    return value


def _endpoints(interfaces: list[Mapping[str, Any]], what: str) -> tuple[WorkerEndpoint, ...]:
    """The one worker's addresses, once the first interface has an internal one."""
    if not interfaces:
        return ()
    first = interfaces[0]
    internal = optional_str(first, "networkIP", what)
    if internal is None:
        return ()
    configs = _objects(first.get("accessConfigs"), f"{what}: accessConfigs")
    external = optional_str(configs[0], "natIP", what) if configs else None
    return (WorkerEndpoint(index=0, internal_ip=internal, external_ip=external),)


def _tags(value: object, what: str) -> tuple[str, ...]:
    """`tags.items`: network tags (the Tags object also carries a fingerprint)."""
    if value is None:
        return ()
    items = value.get("items") if isinstance(value, Mapping) else value
    if items is None:
        return ()
    if not isinstance(items, list) or not all(isinstance(t, str) for t in items):
        raise MalformedResource(f"{what}: tags is not a list of strings: {raw_excerpt(value)}")
    return tuple(items)


def instance_from_json(zone: str, data: Mapping[str, Any]) -> ObservedNode:
    """An instance as the planner sees it. Raises MalformedResource (a ValueError) for one
    without a name or with a field of the wrong type."""
    name = data.get("name")
    if not isinstance(name, str) or not name.strip("/"):
        raise MalformedResource(f"instance without a name in zone {zone}: {raw_excerpt(name)}")
    what = f"instance {short_name(name)}"
    raw = data.get("status")
    status = parse_status(raw)
    interfaces = _objects(data.get("networkInterfaces"), f"{what}: networkInterfaces")
    accounts = _objects(data.get("serviceAccounts"), f"{what}: serviceAccounts")
    machine_type = optional_str(data, "machineType", what)
    network = optional_str(interfaces[0], "network", what) if interfaces else None
    subnetwork = optional_str(interfaces[0], "subnetwork", what) if interfaces else None
    return ObservedNode(
        name=short_name(name),
        zone=zone,
        **state_fields(status),
        accelerator_type=short_name(machine_type) if machine_type else "",
        labels=str_map(data.get("labels"), f"{what}: labels"),
        cloud_id=optional_str(data, "id", what),
        create_time=parse_time(data.get("creationTimestamp")),
        endpoints=_endpoints(interfaces, what),
        raw_state=raw_excerpt(raw) if status is InstanceStatus.UNRECOGNIZED else None,
        run_ends_at=run_end(data, what),
        maintenance=upcoming_maintenance(data, what),
        made=NodeMade(
            network=network,
            subnetwork=subnetwork,
            service_account=optional_str(accounts[0], "email", what) if accounts else None,
            tags=_tags(data.get("tags"), what),
        ),
    )


def run_end(data: Mapping[str, Any], what: str = "instance") -> datetime | None:
    """When the cloud ends the instance's run (a flex-start VM's planned end), or None:
    `resourceStatus.scheduling.terminationTimestamp`. MalformedResource for a block that is
    not an object."""
    block: Mapping[str, Any] = data
    for key in ("resourceStatus", "scheduling"):
        inner = block.get(key)
        if inner is None:
            return None
        if not isinstance(inner, Mapping):
            raise MalformedResource(f"{what}: {key} is not an object: {raw_excerpt(inner)}")
        block = inner
    return parse_time(block.get("terminationTimestamp"))


def upcoming_maintenance(
    data: Mapping[str, Any], what: str = "instance"
) -> MaintenanceWindow | None:
    """The instance's next host-maintenance window, or None:
    `resourceStatus.upcomingMaintenance` (gcp/maintenance.py). MalformedResource for a block of
    the wrong shape."""
    status = data.get("resourceStatus")
    if status is None:
        return None
    if not isinstance(status, Mapping):
        raise MalformedResource(f"{what}: resourceStatus is not an object: {raw_excerpt(status)}")
    return maintenance.window(status.get("upcomingMaintenance"), what)
