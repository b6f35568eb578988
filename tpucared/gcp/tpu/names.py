"""Resource names of the TPU v2 API, built and taken apart in one place.

The API addresses everything by relative resource name (`projects/P/locations/Z/nodes/N`);
the client turns a name into a URL as `{endpoint}/v2/{name}[:verb]`. Everything else in
tpucared passes names around and never concatenates path pieces itself.
"""

from __future__ import annotations

from collections.abc import Callable

API_VERSION = "v2"


def _segment(value: str, what: str) -> str:
    # A slash or an empty piece would silently address a different resource.
    if not value or "/" in value:
        raise ValueError(f"invalid {what} {value!r}: must be non-empty and contain no '/'")
    return value


def location(project: str, zone: str) -> str:
    """`projects/P/locations/Z`: the parent of nodes, operations and queued resources."""
    return f"projects/{_segment(project, 'project')}/locations/{_segment(zone, 'zone')}"


def node_name(project: str, zone: str, node_id: str) -> str:
    return f"{location(project, zone)}/nodes/{_segment(node_id, 'node id')}"


def queued_resource_name(project: str, zone: str, qr_id: str) -> str:
    return f"{location(project, zone)}/queuedResources/{_segment(qr_id, 'queued resource id')}"


def reservation_wildcard(project: str, zone: str) -> str:
    """Any reservation of the project in the zone; what `gcloud ... --reserved` sends (v2)."""
    return f"{location(project, zone)}/reservations/-"


def resolve(parts: tuple[str, ...], build: Callable[[str, str, str], str]) -> str:
    """A full resource name from either (name,) or (project, zone, id): the two ways the
    client's get/delete calls may be addressed."""
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 3:
        return build(*parts)
    raise TypeError("pass a full resource name, or project, zone and id")


def short_name(name: str) -> str:
    """The last segment of a resource name: `projects/p/locations/z/nodes/n` -> `n`."""
    return name.rstrip("/").rsplit("/", 1)[-1]


def zone_of(name: str) -> str | None:
    """The `locations/{zone}` segment of a resource name, if it has one."""
    parts = name.split("/")
    for i, part in enumerate(parts[:-1]):
        if part == "locations":
            return parts[i + 1]
    return None
