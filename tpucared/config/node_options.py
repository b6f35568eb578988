"""A fleet's node options (`network`, `subnetwork`, `service_account`, `tags`, `metadata`,
`data_disks`, `reservation`, a `compute` fleet's `on_preemption`, `topology` and
`max_run_duration`): their syntax on the table,
and the rules across keys.

Part of pass one (the per-value patterns, used by `schema.py`) and pass two (`node_options`,
called by `build.py` for each fleet). Formats follow what the TPU API and Compute Engine accept,
so a typo is one line naming the key here rather than a 400 from the cloud on every create.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from tpucared.config.syntax import COMPUTE_API, ZONE_PATTERN, pattern
from tpucared.core.model.specs import (
    DEFAULT_API,
    CapacityKind,
    DataDisk,
    DiskMode,
    NodeOptions,
    Provisioning,
)

if TYPE_CHECKING:  # messages imports the schema, which imports this module's types
    from tpucared.config.problems import Problems

_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"  # RFC 1035: networks, disks, tags, reservations
_PROJECT = r"[a-z][-a-z0-9]{4,28}[a-z0-9]"
_ZONE = ZONE_PATTERN
_REGION = r"[a-z]+-[a-z]+[0-9]+"

Network = Annotated[
    str,
    pattern(
        rf"(?:projects/{_PROJECT}/global/networks/)?{_NAME}",
        'a network like "projects/P/global/networks/N" or its short name "N"',
    ),
]
Subnetwork = Annotated[
    str,
    pattern(
        rf"(?:projects/{_PROJECT}/regions/{_REGION}/subnetworks/)?{_NAME}",
        'a subnetwork like "projects/P/regions/R/subnetworks/S" or its short name "S"',
    ),
]
ServiceAccount = Annotated[
    str,
    pattern(
        r"[a-z][-a-z0-9]{4,28}[a-z0-9]@[-a-z0-9.]+\.iam\.gserviceaccount\.com"
        r"|[0-9]+-compute@developer\.gserviceaccount\.com",
        'a service account e-mail like "trainer@P.iam.gserviceaccount.com"',
    ),
]
AccountEmail = Annotated[
    str,
    pattern(
        r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+",
        'an account e-mail like "tpucared@P.iam.gserviceaccount.com"',
    ),
]
Scope = Annotated[
    str,
    pattern(
        r"https://www\.googleapis\.com/auth/[a-z0-9._-]+",
        'an OAuth scope like "https://www.googleapis.com/auth/cloud-platform"',
    ),
]
NetworkTag = Annotated[
    str, pattern(_NAME, "a network tag: a lowercase letter, then letters, digits or '-'")
]
MetadataKey = Annotated[
    str, pattern(r"[A-Za-z0-9_-]{1,128}", "a metadata key: letters, digits, '_' or '-'")
]
DiskSource = Annotated[
    str,
    pattern(
        rf"projects/{_PROJECT}/zones/{_ZONE}/disks/{_NAME}",
        'a disk like "projects/P/zones/Z/disks/D"',
    ),
]
# The TPU API names a reservation by `locations/Z`, Compute Engine by `zones/Z`.
Reservation = Annotated[
    str,
    pattern(
        rf"projects/{_PROJECT}/(?:locations|zones)/{_ZONE}/reservations/{_NAME}",
        'a reservation like "projects/P/locations/Z/reservations/R" (api "tpu") or '
        '"projects/P/zones/Z/reservations/R" (api "compute")',
    ),
]
Tags = Annotated[list[NetworkTag], Field(max_length=64)]
Metadata = dict[MetadataKey, str]

# Metadata keys tpucared writes itself: a user value would lock it out of its own workers.
RESERVED_METADATA = ("ssh-keys", "enable-oslogin")
MAX_METADATA_BYTES = 256 * 1024  # Compute Engine's limit for all of an instance's metadata


def node_options(
    at: str,
    *,
    zones: Sequence[str],
    capacity: CapacityKind,
    provisioning: Provisioning,
    network: str | None,
    subnetwork: str | None,
    service_account: str | None,
    service_account_scopes: Sequence[str],
    tags: Sequence[str],
    metadata: Mapping[str, str],
    data_disks: Sequence[tuple[str, DiskMode]],
    reservation: str | None,
    problems: Problems,
    api: str = DEFAULT_API,
    on_preemption: str | None = None,
    topology: str | None = None,
    max_run_duration_s: int | None = None,
    reservation_bound: bool | None = None,
) -> NodeOptions:
    """The fleet's `NodeOptions`, with each rule across keys it breaks added to `problems`."""
    for key in RESERVED_METADATA:
        if key in metadata:
            problems.add(f"{at}: metadata.{key}", "reserved: tpucared sets it itself")
    size = sum(len(k) + len(v.encode()) for k, v in metadata.items())
    if size > MAX_METADATA_BYTES:
        problems.add(f"{at}: metadata", f"{size} bytes, more than the {MAX_METADATA_BYTES} allowed")
    if len(set(tags)) != len(tags):
        problems.add(f"{at}: tags", "a tag is listed more than once")
    if service_account_scopes and service_account is None:
        problems.add(f"{at}: service_account_scopes", "needs service_account")
    for i, (source, _) in enumerate(data_disks):
        disk_zone = source.split("/")[3]
        if set(zones) != {disk_zone}:
            problems.add(
                f"{at}: data_disks[{i}].source",
                f"a disk attaches only in its own zone ({disk_zone}): "
                f"the fleet's zones must be [{disk_zone!r}], got {list(zones)}",
            )
    if len({source for source, _ in data_disks}) != len(data_disks):
        problems.add(f"{at}: data_disks", "a disk is listed more than once")
    if api == COMPUTE_API:
        _compute_reservation(at, zones, capacity, reservation, problems)
    elif reservation is not None:
        _tpu_reservation(at, zones, capacity, provisioning, reservation, problems)
    return NodeOptions(
        network=network,
        subnetwork=subnetwork,
        service_account=service_account,
        service_account_scopes=tuple(service_account_scopes),
        tags=tuple(tags),
        metadata=dict(metadata),
        data_disks=tuple(DataDisk(source, mode) for source, mode in data_disks),
        reservation=reservation,
        on_preemption=on_preemption,
        topology=topology,
        max_run_duration_s=max_run_duration_s,
        reservation_bound=reservation_bound,
    )


def _tpu_reservation(
    at: str,
    zones: Sequence[str],
    capacity: CapacityKind,
    provisioning: Provisioning,
    reservation: str,
    problems: Problems,
) -> None:
    """A TPU API fleet's reservation: by name only through a queued resource."""
    if reservation.split("/")[2] != "locations":
        problems.add(
            f"{at}: reservation",
            f'the TPU API names it "projects/P/locations/Z/reservations/R", got "{reservation}"',
        )
    elif capacity is not CapacityKind.RESERVED or provisioning is not Provisioning.QUEUED:
        problems.add(
            f"{at}: reservation",
            'a reservation by name needs capacity = "reserved" and provisioning = "queued" '
            "(nodes.create takes no reservation name: it uses any reservation of the project)",
        )
    elif set(zones) != {reservation.split("/")[3]}:
        problems.add(
            f"{at}: reservation",
            f"the reservation is in {reservation.split('/')[3]}: the fleet's zones must be "
            f"that zone only, got {list(zones)}",
        )


def _compute_reservation(
    at: str,
    zones: Sequence[str],
    capacity: CapacityKind,
    reservation: str | None,
    problems: Problems,
) -> None:
    """A `compute` fleet's reservation: by name, in the fleet's one zone, for capacity
    "reserved" (Compute Engine's SPECIFIC_RESERVATION affinity), which needs one."""
    if reservation is None:
        if capacity is CapacityKind.RESERVED:
            problems.add(
                f"{at}: reservation",
                'required with capacity = "reserved" on Compute Engine: '
                '"projects/P/zones/Z/reservations/R" (it has no "any reservation, or fail")',
            )
        return
    kind, zone = reservation.split("/")[2:4]
    if kind != "zones":
        problems.add(
            f"{at}: reservation",
            f'Compute Engine names it "projects/P/zones/Z/reservations/R", got "{reservation}"',
        )
    elif capacity is not CapacityKind.RESERVED:
        problems.add(f"{at}: reservation", 'a reservation by name needs capacity = "reserved"')
    elif set(zones) != {zone}:
        problems.add(
            f"{at}: reservation",
            f"the reservation is in {zone}: the fleet's zones must be that zone only, "
            f"got {list(zones)}",
        )
