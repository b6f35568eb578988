"""The observer's cloud APIs (runtime/nodes/observer.py): a location is listed through every
API its fleets and live incarnations use, against the emulator's TPU API and Compute Engine
surfaces on one port: a zone shared by a TPU API fleet and a compute fleet is two lists, each
observation naming its API; a removed fleet's node is listed by the API that made it."""

from __future__ import annotations

from datetime import UTC, datetime

from runtime_support import OWNER, PROJECT, ZONE

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import (
    FLEET_LABEL,
    OWNER_LABEL,
    CapacityKind,
    ErrorKind,
    FleetSpec,
)
from tpucared.gcp import NoAuth
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.gcp.tpu import TpuClient, TpuCloud
from tpucared.ports.cloud import NodeShape
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.nodes.observer import Observer, by_location, zones_to_observe
from tpucared_emulator import EmulatorServer

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
SWEEP = FleetSpec("sweep", (ZONE,), "v4-8", 1, {"runtime_version": "tpu-ubuntu2204-base"})
IRON = FleetSpec(
    "iron", (ZONE, "us-east5-b"), "ct6e-standard-1t", 1, {"runtime_version": ""}, api="compute"
)


def incarnation(fleet: str, zone: str, api: str) -> IncarnationRecord:
    return IncarnationRecord(
        id=1, fleet=fleet, slot=0, node_name=f"{fleet}-0", zone=zone,
        accelerator_type="tpu7x-standard-4t", phase=NodePhase.READY, phase_since=NOW,
        requested_at=NOW, api=api,
    )  # fmt: skip


def test_a_shared_zone_is_listed_by_both_apis() -> None:
    zones = zones_to_observe([SWEEP, IRON], [])
    assert zones.nodes == {("", ZONE), ("", "us-east5-b")}
    assert zones.apis(("", ZONE)) == ("compute", "tpu")
    assert zones.apis(("", "us-east5-b")) == ("compute",)


def test_a_removed_fleets_node_is_listed_by_the_api_that_made_it() -> None:
    """ "gone" is no longer in the config: its recorded api says which cloud lists its zone."""
    zones = zones_to_observe([SWEEP], [incarnation("gone", "us-central1-c", "compute")])
    assert zones.apis(("", "us-central1-c")) == ("compute",)
    assert zones.apis(("", ZONE)) == ("tpu",)


def test_one_failed_list_of_a_location_is_what_its_health_records() -> None:
    ok = ZoneObservation(zone=ZONE, observed_at=NOW, api="compute")
    failed = ZoneObservation(zone=ZONE, observed_at=NOW, error=ErrorKind.TRANSIENT)
    other = ZoneObservation(zone="us-east5-b", observed_at=NOW, api="compute")
    assert by_location([ok, failed, other]) == [failed, other]
    assert by_location([ok, other]) == [ok, other]


async def test_each_api_lists_its_own_in_a_shared_zone(emulator: EmulatorServer) -> None:
    labels = {OWNER_LABEL: OWNER}
    tpu = TpuCloud(TpuClient(emulator.url, token_source=NoAuth()))
    compute = ComputeCloud(ComputeClient(emulator.url, token_source=NoAuth()), owner=OWNER)
    try:
        for cloud, spec in ((tpu, SWEEP), (compute, IRON)):
            shape = NodeShape(
                accelerator_type=spec.accelerator_type,
                extra={"runtime_version": spec.extra["runtime_version"]},
                capacity=CapacityKind.SPOT,
                labels={**labels, FLEET_LABEL: spec.name},
            )
            await cloud.create(PROJECT, ZONE, spec.node_name(0), shape)
        clouds = CloudMap({"tpu": tpu, "compute": compute}, [SWEEP, IRON])
        zones = zones_to_observe([SWEEP, IRON], [])
        observed = await Observer(clouds, PROJECT).observe(zones, NOW)
    finally:
        await tpu.aclose()
        await compute.aclose()
    here = {o.api: [n.name for n in o.nodes] for o in observed if o.zone == ZONE}
    assert here == {"compute": ["iron-0"], "tpu": ["sweep-0"]}
    assert all(o.ok for o in observed)
