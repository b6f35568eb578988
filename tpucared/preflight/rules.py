"""What the preflight concludes from the config alone and from Google's answers: pure rules,
no I/O (the checks in checks.py ask, these decide).

- where a fleet's resources are: its project, the path of its network, subnetwork (per
  region), image;
- quotas: which of a service's quotas (Cloud Quotas `quotaInfos`) a fleet's nodes draw on
  (`match_quota`), its limit in the fleet's region, and how many nodes that allows.

The TPU API's resource quotas are the `tpu.googleapis.com` service's, one per TPU version and
kind ("different quotas for each version of TPU ... on-demand and preemptible (spot)",
https://cloud.google.com/tpu/docs/quota), listed by the Cloud Quotas API
(https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.services.quotaInfos:
`quotaId`, `metricUnit`, `dimensionsInfos[{dimensions: {region|zone}, details: {value}}]`, a
dimensions info without a dimension applying to every other value). Their ids are not
documented; the one seen in an error is `TPUV6EPreemptiblePerProjectPerRegionForTPUAPI` ([3P]
marin-community/marin#1612, docs/research/compute-engine.md 7.2), so a quota is matched by the
generation in its id (`TPUV6E`), `Preemptible` for spot and preemptible capacity, and not
`Serving`. Compute Engine's regions.get names TPU metrics only for v4 and v5e
(google.cloud.compute_v1 `Quota.Metric`), Compute Engine quotas: not the TPU API's. Units are
counted as the accelerator type's suffix (TensorCores for v4, chips for v5e and later; the
quota page says v4 and v5p quota "can be specified in terms of Cloud TPU chips or TensorCores":
`metricUnit` is shown beside).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpucared.config.syntax import COMPUTE_API
from tpucared.core.model.machines import MACHINE_TYPES
from tpucared.core.model.specs import DEFAULT_PROJECT, CapacityKind, FleetSpec
from tpucared.ports.cloud import SOFTWARE_KEY

DEFAULT_NETWORK = "default"  # what both APIs use when a fleet names none

# A fleet's machine -> the token its quotas' ids carry: the TPU API's by accelerator type
# prefix, Compute Engine's by machine family (unconfirmed: no id seen, so no match is a WARN).
_QUOTA_KEYS = {
    "v2": "TPUV2",
    "v3": "TPUV3",
    "v4": "TPUV4",
    "v5p": "TPUV5P",
    "v5litepod": "LITEPOD",
    "v6e": "TPUV6E",
    "tpu7x": "TPU7X",
    "ct6e": "CT6E",
    "ct5p": "CT5P",
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


def software(fleet: FleetSpec) -> str:
    """What the fleet's nodes boot: a TPU API fleet's runtime version, a `compute` fleet's
    image ("": its machine type's default), as the config put it in `FleetSpec.extra`."""
    return fleet.extra.get(SOFTWARE_KEY, "")


def image_path(fleet: FleetSpec) -> str | None:
    """A `compute` fleet's boot image as a path images.get(FromFamily) takes; None when
    the machine type has no default (a config error elsewhere)."""
    if image := software(fleet):
        return image
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


def quota_service(fleet: FleetSpec) -> str:
    return "compute.googleapis.com" if fleet.api == COMPUTE_API else "tpu.googleapis.com"


def quota_key(fleet: FleetSpec) -> str | None:
    """The token the ids of the fleet's quotas carry, or None for a machine we know none of."""
    if fleet.api == COMPUTE_API:
        return _QUOTA_KEYS.get(fleet.accelerator_type.partition("-")[0])
    return _QUOTA_KEYS.get(fleet.accelerator_type.rpartition("-")[0])


def units_per_node(fleet: FleetSpec) -> int:
    """Quota units one node takes: a TPU API type's suffix (v4-32: 32), a `compute` slice's
    chips (chips per VM times its VMs)."""
    if fleet.api == COMPUTE_API:
        machine = MACHINE_TYPES.get(fleet.accelerator_type)
        return (machine.chips if machine else 1) * fleet.hosts
    count = fleet.accelerator_type.rpartition("-")[2]
    return int(count) if count.isdigit() else 1


@dataclass(frozen=True)
class QuotaAnswer:
    quota_id: str
    limit: int  # -1: unlimited
    unit: str


def _limit(info: dict[str, Any], fleet: FleetSpec, region: str) -> int | None:
    """The quota's value for the fleet's region (or one of its zones there), else the value
    every other place gets; None when neither is listed."""
    default: int | None = None
    zones = {z for z in fleet.zones if region_of(z) == region}
    for entry in info.get("dimensionsInfos") or ():
        if not isinstance(entry, dict):
            continue
        dims = entry.get("dimensions") or {}
        try:
            value = int((entry.get("details") or {}).get("value", 0))
        except (TypeError, ValueError):
            continue
        if dims.get("region") == region or dims.get("zone") in zones:
            return value
        if not dims:
            default = value
    return default


def match_quota(infos: list[dict[str, Any]], fleet: FleetSpec, region: str) -> QuotaAnswer | None:
    """The fleet's quota among a service's `quotaInfos` in `region`: the tightest of those
    whose id carries its generation and its kind (see the module's docstring)."""
    key = quota_key(fleet)
    if key is None:
        return None
    preemptible = fleet.capacity in _PREEMPTIBLE
    found: list[QuotaAnswer] = []
    for info in infos:
        quota_id = str(info.get("quotaId", ""))
        upper = quota_id.upper()
        if key not in upper or "SERVING" in upper or ("PREEMPTIBLE" in upper) != preemptible:
            continue
        if ("RESERVED" in upper) != (fleet.capacity is CapacityKind.RESERVED):
            continue
        limit = _limit(info, fleet, region)
        if limit is not None:
            found.append(QuotaAnswer(quota_id, limit, str(info.get("metricUnit", ""))))
    limited = [a for a in found if a.limit >= 0]
    if limited:
        return min(limited, key=lambda a: a.limit)
    return found[0] if found else None


def sharing(
    infos: list[dict[str, Any]], fleets: list[FleetSpec], region: str, quota_id: str
) -> list[FleetSpec]:
    """The fleets (of one project and service) that draw on `quota_id` in `region`: their
    nodes together must fit in it."""
    return [
        f
        for f in fleets
        if region in regions_of(f)
        and (answer := match_quota(infos, f, region)) is not None
        and answer.quota_id == quota_id
    ]


def nodes_allowed(answer: QuotaAnswer, per_node: int) -> int | None:
    """How many nodes of `per_node` units the limit holds at once; None: unlimited."""
    if answer.limit < 0:
        return None
    return answer.limit // max(per_node, 1)
