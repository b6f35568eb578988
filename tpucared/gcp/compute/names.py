"""Compute Engine v1 paths, built and taken apart in one place.

Compute Engine addresses a zone's resources by path (`projects/P/zones/Z/instances/N`); the
client turns a path into a URL as `{endpoint}/compute/v1/{path}[/{verb}]`. An operation's
name alone does not say where it lives (zoneOperations.get needs the project and the zone),
so the name the Cloud port hands out (`OperationState.name`) is the operation's path,
`projects/P/zones/Z/operations/O`, which `operation_place` takes apart again.

A multi-host slice (slices.py) adds two more scopes and one name of ours: workload policies are
regional (`projects/P/regions/R/resourcePolicies/N`, their operations `regions/R/operations`),
instance templates global (`projects/P/global/instanceTemplates/N`, `global/operations`), and
the name `create` hands out for a slice is `projects/P/zones/Z/instanceGroupManagers/M/
operations/O` (`slice_operation_place`): the MIG's insert operation O, then the slice's own
provisioning, which `poll` checks (ComputeCloud.poll routes on the path's shape).
"""

from __future__ import annotations

API_PATH = "compute/v1"
DEFAULT_ENDPOINT = "https://compute.googleapis.com"
TPU_ENDPOINT = "https://tpu.googleapis.com"  # config's gcp.endpoint default (the TPU API's)


def endpoint_for(tpu_endpoint: str) -> str:
    """Google's Compute Engine for Google's TPU API; the same server for an emulator's (it
    serves `/compute/v1` beside `/v2` on one port)."""
    return DEFAULT_ENDPOINT if tpu_endpoint.rstrip("/") == TPU_ENDPOINT else tpu_endpoint


def _segment(value: str, what: str) -> str:
    # A slash or an empty piece would silently address a different resource.
    if not value or "/" in value:
        raise ValueError(f"invalid {what} {value!r}: must be non-empty and contain no '/'")
    return value


def zone_path(project: str, zone: str) -> str:
    """`projects/P/zones/Z`: the parent of instances and zone operations."""
    return f"projects/{_segment(project, 'project')}/zones/{_segment(zone, 'zone')}"


def instance_path(project: str, zone: str, name: str) -> str:
    return f"{zone_path(project, zone)}/instances/{_segment(name, 'instance name')}"


def operation_path(project: str, zone: str, name: str) -> str:
    return f"{zone_path(project, zone)}/operations/{_segment(name, 'operation name')}"


def operation_place(path: str) -> tuple[str, str, str]:
    """(project, zone, name) of an `operation_path`; ValueError for anything else."""
    parts = path.strip("/").split("/")
    if len(parts) != 6 or (parts[0], parts[2], parts[4]) != ("projects", "zones", "operations"):
        raise ValueError(f"not a zone operation's path: {path!r}")
    project, zone, name = parts[1], parts[3], parts[5]
    operation_path(project, zone, name)  # each piece checked
    return project, zone, name


def region_path(project: str, region: str) -> str:
    """`projects/P/regions/R`: the parent of workload policies and regional operations."""
    return f"projects/{_segment(project, 'project')}/regions/{_segment(region, 'region')}"


def global_path(project: str) -> str:
    """`projects/P/global`: the parent of instance templates and global operations."""
    return f"projects/{_segment(project, 'project')}/global"


def policy_path(project: str, region: str, name: str) -> str:
    return f"{region_path(project, region)}/resourcePolicies/{_segment(name, 'policy name')}"


def template_path(project: str, name: str) -> str:
    return f"{global_path(project)}/instanceTemplates/{_segment(name, 'template name')}"


def mig_path(project: str, zone: str, name: str) -> str:
    return f"{zone_path(project, zone)}/instanceGroupManagers/{_segment(name, 'MIG name')}"


def slice_operation_path(project: str, zone: str, mig: str, operation: str) -> str:
    """The name `create` hands out for a slice: its MIG's path and the insert's operation."""
    return f"{mig_path(project, zone, mig)}/operations/{_segment(operation, 'operation name')}"


def slice_operation_place(path: str) -> tuple[str, str, str, str]:
    """(project, zone, MIG, operation) of a `slice_operation_path`; ValueError otherwise."""
    parts = path.strip("/").split("/")
    shape = ("projects", "zones", "instanceGroupManagers", "operations")
    if len(parts) != 8 or (parts[0], parts[2], parts[4], parts[6]) != shape:
        raise ValueError(f"not a slice operation's path: {path!r}")
    project, zone, mig, operation = parts[1], parts[3], parts[5], parts[7]
    slice_operation_path(project, zone, mig, operation)  # each piece checked
    return project, zone, mig, operation


def names_mig(url: str, zone: str) -> str | None:
    """The MIG's name when a URL or path (a member's `created-by`) is a MIG of `zone`, else
    None. Only the `zones/{zone}/instanceGroupManagers/{name}` tail is compared: Google
    writes the project's number there (`projects/776293755095/zones/...`), not the id the
    config names, and an instances.list answers for one project only."""
    prefix = f"zones/{_segment(zone, 'zone')}/instanceGroupManagers/"
    path = url.rstrip("/")
    at = path.find(prefix)
    if at < 0 or (at > 0 and path[at - 1] != "/"):
        return None
    rest = path[at + len(prefix) :]
    return rest if rest and "/" not in rest else None


def region_of(zone: str) -> str:
    """`us-central1-c` -> `us-central1` (a zone is its region and a letter suffix)."""
    region, dash, _ = zone.rpartition("-")
    if not dash or not region:
        raise ValueError(f"zone {zone!r} does not name a region")
    return region


def short_name(url: str) -> str:
    """The last segment of a URL or path: `.../zones/z/instances/n` -> `n`."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def place_of(url: str) -> tuple[str, str] | None:
    """(project, zone) named by a URL or path with `projects/P/zones/Z`, or None."""
    parts = url.split("/")
    for i in range(len(parts) - 3):
        if parts[i] == "projects" and parts[i + 2] == "zones" and parts[i + 1] and parts[i + 3]:
            return parts[i + 1], parts[i + 3]
    return None


def names_instance(url: str, project: str, zone: str, name: str) -> bool:
    """Whether a URL (an operation's `targetLink`, on whatever host) is this instance's:
    compared by path, since Google writes `https://www.googleapis.com/compute/v1/...` and an
    emulator its own address."""
    return url.rstrip("/").endswith("/" + instance_path(project, zone, name))
