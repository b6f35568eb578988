"""What the preflight concludes from the config alone and from Google's answers: pure rules,
no I/O (the checks in checks.py ask, these decide).

- where a fleet's resources are: its project, the path of its network, subnetwork (per
  region), image;
- quotas: which Compute Engine regional quota metric a fleet draws on (`quota_metric`) and
  how many of its nodes a (limit, usage) allows (`nodes_allowed`).

Quota metrics come from google.cloud.compute_v1 `Quota.Metric` (the `Region.quotas[].metric`
enum, the discovery document's): it names TPU metrics for v4 (`TPU_PODSLICE_V4`) and v5e
(`TPU_LITE_PODSLICE_V5`), each with a `PREEMPTIBLE_` twin, and none for v5p, v6e or TPU7x,
whose quotas live with the TPU service (https://cloud.google.com/tpu/docs/quota: "different
quotas for each version of TPU ... reserved, on-demand, preemptible (spot)"), not in
regions.get. The unit is counted as the accelerator type's suffix (TensorCores for v4, chips
for v5e, as the quota page counts them): unconfirmed for the Compute Engine metric.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpucared.core.model.machines import MACHINE_TYPES
from tpucared.core.model.specs import COMPUTE_API, DEFAULT_PROJECT, CapacityKind, FleetSpec

DEFAULT_NETWORK = "default"  # what both APIs use when a fleet names none

# Accelerator type prefix -> the Compute Engine quota metric it draws on (on-demand name).
_QUOTA_METRICS = {
    "v4": "TPU_PODSLICE_V4",
    "v5litepod": "TPU_LITE_PODSLICE_V5",
}
_PREEMPTIBLE = (CapacityKind.SPOT, CapacityKind.PREEMPTIBLE)


def project_of(fleet: FleetSpec, default: str) -> str:
    return default if fleet.project == DEFAULT_PROJECT else fleet.project


def region_of(zone: str) -> str:
    return zone.rpartition("-")[0] or zone


def regions_of(fleet: FleetSpec) -> list[str]:
    """The fleet's regions, in the order of its zones."""
    return list(dict.fromkeys(region_of(z) for z in fleet.zones))


def network_path(network: str | None, project: str) -> str:
    """`projects/P/global/networks/N` for a short name (the fleet's project's) or a path."""
    name = network or DEFAULT_NETWORK
    return name if "/" in name else f"projects/{project}/global/networks/{name}"


def subnetwork_paths(subnetwork: str, fleet: FleetSpec, project: str) -> list[str]:
    """The subnetwork each of the fleet's regions uses: a short name is each region's own
    (gcp/compute/bodies.py `subnetwork_url`), a path is one region's."""
    if "/" in subnetwork:
        return [subnetwork]
    return [f"projects/{project}/regions/{r}/subnetworks/{subnetwork}" for r in regions_of(fleet)]


def regions_outside(path: str, fleet: FleetSpec) -> list[str]:
    """Zones of the fleet whose region is not the subnetwork's (`projects/P/regions/R/...`):
    a VM's subnetwork must be in its own region."""
    parts = path.split("/")
    region = parts[3] if len(parts) > 3 and parts[2] == "regions" else None
    return [z for z in fleet.zones if region is not None and region_of(z) != region]


def short(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def same_network(url: str, path: str) -> bool:
    """Whether a subnetwork's `network` (a URL) is the network at `path`."""
    return url.rstrip("/").endswith("/" + path.removeprefix("/")) or short(url) == short(path)


def image_path(fleet: FleetSpec) -> str | None:
    """A `compute` fleet's boot image as a path images.get(FromFamily) takes; None when
    the machine type has no default (a config error elsewhere)."""
    if fleet.runtime_version:
        return fleet.runtime_version
    machine = MACHINE_TYPES.get(fleet.accelerator_type)
    return machine.default_image if machine else None


def reservation_path(reservation: str, fleet: FleetSpec, project: str) -> str:
    """The reservation's full path: the TPU API's `projects/P/locations/Z/reservations/R`
    as written; a `compute` fleet's as the config hands it on (`R` in the fleet's project,
    `projects/O/reservations/R` shared from another, or the full zonal path), in the fleet's
    one zone (the config refuses a reservation outside it)."""
    parts = reservation.split("/")
    if len(parts) == 6:
        return reservation
    owner = parts[1] if len(parts) == 4 else project
    return f"projects/{owner}/zones/{fleet.zones[0]}/reservations/{parts[-1]}"


def quota_metric(fleet: FleetSpec) -> str | None:
    """The Compute Engine regional metric the fleet's nodes count against, or None where
    regions.get reports none for its TPU generation (see the module's docstring)."""
    if fleet.api == COMPUTE_API:
        return None
    metric = _QUOTA_METRICS.get(fleet.accelerator_type.rpartition("-")[0])
    if metric is None:
        return None
    return f"PREEMPTIBLE_{metric}" if fleet.capacity in _PREEMPTIBLE else metric


def units_per_node(fleet: FleetSpec) -> int:
    """Quota units one node takes: the accelerator type's suffix (v4-32: 32)."""
    count = fleet.accelerator_type.rpartition("-")[2]
    return int(count) if count.isdigit() else 1


@dataclass(frozen=True)
class QuotaAnswer:
    metric: str
    limit: float
    usage: float


def find_quota(region: dict[str, object], metric: str) -> QuotaAnswer | None:
    """The `metric` entry of a regions.get answer's `quotas`."""
    quotas = region.get("quotas")
    if not isinstance(quotas, list):
        return None
    for entry in quotas:
        if isinstance(entry, dict) and entry.get("metric") == metric:
            limit, usage = entry.get("limit", 0), entry.get("usage", 0)
            if isinstance(limit, int | float) and isinstance(usage, int | float):
                return QuotaAnswer(metric, float(limit), float(usage))
    return None


def nodes_allowed(answer: QuotaAnswer, per_node: int) -> int:
    """How many more nodes of `per_node` units the free quota holds."""
    free = max(0.0, answer.limit - answer.usage)
    return int(free // max(per_node, 1))
