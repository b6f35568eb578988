"""The scale benchmark's two APIs (issue 27): what differs in bench/scale.py between fleets of
TPU API nodes (`--api tpu`, the default) and fleets of Compute Engine instances (`--api
compute`): how the emulator process is seeded, the daemon's [[fleet]] keys, the names of the
requests in the emulator's log, and how many list pages one tick needs.

A Compute Engine fleet is seeded with N spot `tpu7x-standard-4t` instances (one host each),
RUNNING, spread over the same 4 fleets and zones, each named and labelled as the daemon names
and labels its own and carrying its key in `ssh-keys`: inserted through the emulator's own
request handler (the body the daemon would send), then the emulator's timers run at once
(create time 0). instances.list pages hold at most 500 instances (`maxResults`, the documented
maximum and default), against the TPU API's 1,000 (the emulator's `max_page_size`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bench.scale_fleet import OWNER, PROJECT, fleet_layout

APIS = ("tpu", "compute")
MACHINE = "tpu7x-standard-4t"
TPU_MAX_PAGE = 1000  # EmulatorOptions.max_page_size
TPU_DEFAULT_PAGE = 5  # the emulator's page when the daemon sends no pageSize
COMPUTE_MAX_PAGE = 500  # instances.list maxResults: its maximum and default


def list_kind(api: str) -> str:
    return "instances.list" if api == "compute" else "nodes.list"


def other_lists(size: int, api: str) -> dict[str, int]:
    """The lists a tick makes besides the node pages: Compute Engine's one
    instanceGroupManagers.list per zone (gcp/compute/observe.py; no MIGs here: one page)."""
    return {"instanceGroupManagers.list": len(fleet_layout(size))} if api == "compute" else {}


def page_parameter(api: str) -> str:
    return "maxResults" if api == "compute" else "pageSize"


def expected_list_pages(size: int, page_size: int | None, api: str = "tpu") -> int:
    """The list requests one tick needs: per zone, ceil(nodes / page) (at least 1), the page
    being what the daemon sent, clamped by the API's maximum (absent: the API's default)."""
    if api == "compute":
        page = min(page_size or COMPUTE_MAX_PAGE, COMPUTE_MAX_PAGE)
    else:
        page = min(page_size or TPU_DEFAULT_PAGE, TPU_MAX_PAGE)
    return sum(max(1, math.ceil(slots / page)) for _, _, slots in fleet_layout(size))


def request_kind(request: Mapping[str, Any]) -> str:
    """The API method a request-log entry is: nodes.list, instances.list, operations.get, ..."""
    method, path = request["method"], request["path"]
    if "/compute/v1/" in path:
        return _compute_kind(method, path)
    if "/operations/" in path:
        return "operations.get"
    if path.endswith("/nodes"):
        return "nodes.list" if method == "GET" else "nodes.create"
    if path.endswith("/queuedResources"):
        return "queuedResources.list" if method == "GET" else "queuedResources.create"
    if path.endswith(":getGuestAttributes"):
        return "nodes.getGuestAttributes"
    if "/nodes/" in path:
        return {"GET": "nodes.get", "DELETE": "nodes.delete", "PATCH": "nodes.patch"}.get(
            method, f"nodes.{method.lower()}"
        )
    return f"{method} other"


def _compute_kind(method: str, path: str) -> str:
    if "/operations" in path:
        return "zoneOperations.list" if path.endswith("/operations") else "zoneOperations.get"
    if path.endswith("/instances"):
        return "instances.list" if method == "GET" else "instances.insert"
    if path.endswith("/instanceGroupManagers"):  # the MIG list every tick (multi-host slices)
        return "instanceGroupManagers.list" if method == "GET" else "instanceGroupManagers.insert"
    if "getGuestAttributes" in path:
        return "instances.getGuestAttributes"
    if "/instances/" in path:
        return {"GET": "instances.get", "DELETE": "instances.delete"}.get(
            method, f"instances.{method.lower()}"
        )
    return f"{method} compute other"


def fleet_keys(api: str) -> dict[str, Any]:
    """What a [[fleet]] of `api` says beyond its name, zone, size and capacity."""
    if api == "compute":
        return {"api": "compute", "machine_type": MACHINE}
    return {}


def seed_compute(server: Any, nodes: int, ssh_keys: str) -> int:
    """`nodes` RUNNING spot instances over fleet_layout's fleets (the emulator's create time
    must be 0); returns how many are RUNNING."""
    from tpucared_emulator.compute import ComputeRequests

    requests = ComputeRequests(server.compute)
    for fleet, zone, slots in fleet_layout(nodes):
        for slot in range(slots):
            requests.insert(PROJECT, zone, _body(f"{fleet}-{slot}", fleet, zone, ssh_keys), None)
    server.state.advance()  # STAGING at once
    server.state.advance()  # RUNNING (each step is its own zero-delay timer)
    return sum(1 for i in server.compute.instances.values() if i.status == "RUNNING")


def _body(name: str, fleet: str, zone: str, ssh_keys: str) -> dict[str, Any]:
    """An insert body as tpucared's compute fleets send it (gcp/compute/bodies.py)."""
    from tpucared.gcp.compute.bodies import default_image

    image = default_image(MACHINE)
    return {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/{MACHINE}",
        "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT",
                   "initializeParams": {"sourceImage": image, "diskSizeGb": "100",
                                        "diskType": f"zones/{zone}/diskTypes/hyperdisk-balanced"}}],
        "networkInterfaces": [{"network": "global/networks/default",
                               "accessConfigs": [{"type": "ONE_TO_ONE_NAT"}]}],
        "serviceAccounts": [{"email": "default",
                             "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
        "metadata": {"items": [{"key": "ssh-keys", "value": ssh_keys},
                               {"key": "enable-guest-attributes", "value": "TRUE"}]},
        "labels": {"tpucared-fleet": fleet, "tpucared-owner": OWNER},
        "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": "STOP",
                       "onHostMaintenance": "TERMINATE", "automaticRestart": False},
    }  # fmt: skip
