"""Builders for the core's tests: specs, observed nodes, zone lists, records, one plan call.

Everything defaults to one small world: fleet "sweep" of two v4-8 spot slices in zones Z1
then Z2, owner "me", the clock at T0. Tests override only what their row is about.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tpucared.core.model.observed import (
    ObservedNode,
    ObservedQueuedResource,
    ZoneObservation,
)
from tpucared.core.model.records import FleetRecord, IncarnationRecord, NodePhase, SlotRecord
from tpucared.core.model.specs import (
    FLEET_LABEL,
    OWNER_LABEL,
    CapacityKind,
    ErrorKind,
    FleetSpec,
    Provisioning,
)
from tpucared.core.nodes.create_rate import NO_CREATES_SENT, CreatesSent
from tpucared.core.nodes.slots import NO_DELETES, DeletesInFlight
from tpucared.core.planning.planner import plan
from tpucared.core.vocab.actions import Action, DeleteNode, Transition
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.core.vocab.snapshot import PlainSnapshot
from tpucared.gcp.tpu.states import NodeState, QueuedState, queued_fields, state_fields

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
Z1, Z2 = "us-central2-b", "europe-west4-a"
OWNER = "me"
FLEET = "sweep"


def ago(**kw: float) -> datetime:
    return T0 - timedelta(**kw)


def spec(
    name: str = FLEET,
    size: int = 2,
    zones: tuple[str, ...] = (Z1, Z2),
    *,
    provisioning: Provisioning = Provisioning.DIRECT,
    capacity: CapacityKind = CapacityKind.SPOT,
    **kw: Any,
) -> FleetSpec:
    return FleetSpec(
        name=name,
        zones=zones,
        accelerator_type=kw.pop("accelerator_type", "v4-8"),
        extra={"runtime_version": "tpu-ubuntu2204-base"},
        size=size,
        capacity=capacity,
        provisioning=provisioning,
        **kw,
    )


def ours(fleet: str = FLEET, owner: str = OWNER) -> dict[str, str]:
    return {FLEET_LABEL: fleet, OWNER_LABEL: owner}


def node(
    name: str = f"{FLEET}-0",
    zone: str = Z1,
    state: NodeState = NodeState.READY,
    labels: Mapping[str, str] | None = None,
    *,
    health: str | None = None,
    cloud_id: str | None = "101",
    queued_resource: str | None = None,
) -> ObservedNode:
    fleet = name.rsplit("-", 1)[0]
    return ObservedNode(
        name=name,
        zone=zone,
        **state_fields(state),
        accelerator_type="v4-8",
        labels=ours(fleet) if labels is None else dict(labels),
        health=health,
        cloud_id=cloud_id,
        queued_resource=queued_resource,
    )


def qr(
    name: str = f"{FLEET}-0",
    zone: str = Z1,
    state: QueuedState = QueuedState.WAITING_FOR_RESOURCES,
    labels: Mapping[str, str] | None = None,
    *,
    error: ErrorKind | None = None,
) -> ObservedQueuedResource:
    fleet = name.rsplit("-", 1)[0]
    return ObservedQueuedResource(
        name=name,
        zone=zone,
        **queued_fields(state),
        labels=ours(fleet) if labels is None else dict(labels),
        node_names=(name,),
        error=error,
    )


def listed(
    zone: str,
    *nodes: ObservedNode,
    queued: Iterable[ObservedQueuedResource] | None = None,
) -> ZoneObservation:
    return ZoneObservation(
        zone=zone,
        observed_at=T0,
        nodes=tuple(nodes),
        queued_resources=None if queued is None else tuple(queued),
    )


def failed(zone: str, kind: ErrorKind = ErrorKind.TRANSIENT) -> ZoneObservation:
    return ZoneObservation(zone=zone, observed_at=T0, error=kind, error_message="boom")


def world(
    *nodes: ObservedNode, queued: bool = False, zones: Iterable[str] = (Z1, Z2)
) -> list[ZoneObservation]:
    """Successful lists of every zone, with `nodes` placed in their zones."""
    return [
        listed(
            z,
            *(n for n in nodes if n.zone == z),
            queued=[] if queued else None,
        )
        for z in zones
    ]


def inc(
    id: int = 1,
    slot: int = 0,
    phase: NodePhase = NodePhase.READY,
    *,
    fleet: str = FLEET,
    zone: str = Z1,
    since: datetime = T0 - timedelta(minutes=5),
    **kw: Any,
) -> IncarnationRecord:
    return IncarnationRecord(
        id=id,
        fleet=fleet,
        slot=slot,
        node_name=f"{fleet}-{slot}",
        zone=zone,
        accelerator_type=kw.pop("accelerator_type", "v4-8"),
        phase=phase,
        phase_since=since,
        requested_at=kw.pop("requested_at", since),
        **kw,
    )


def seen(
    record: IncarnationRecord, n: ObservedNode, since: datetime | None = None
) -> IncarnationRecord:
    """`record` as if the planner had already recorded what `n` shows (no RecordCloud due)."""
    unhealthy = n.health in ("UNHEALTHY_MAINTENANCE", "TIMEOUT")
    return replace(
        record,
        cloud_state=n.state.value,
        cloud_state_since=since or record.phase_since,
        health=n.health,
        unhealthy_since=(since or record.phase_since) if unhealthy else None,
        cloud_id=n.cloud_id,
        create_time=n.create_time,
    )


def slot(index: int = 0, fleet: str = FLEET, **kw: Any) -> SlotRecord:
    return SlotRecord(fleet=fleet, index=index, run_id=f"{fleet}-{index}-r", **kw)


def snapshot(
    *incarnations: IncarnationRecord,
    specs: Iterable[FleetSpec] = (),
    slots: Iterable[SlotRecord] | None = None,
    down: Iterable[str] = (),
    extra_fleets: Iterable[str] = (),
) -> PlainSnapshot:
    """Records as the store would hold them after earlier ticks: fleet and slot records for
    every spec (so no RecordFleet/OpenSlot noise), plus what is passed."""
    specs = list(specs)
    down = set(down)
    fleets = [
        FleetRecord(
            name=s.name, spec_hash=s.spec_hash(), spec_json="{}", applied_at=T0, down=s.name in down
        )
        for s in specs
    ]
    fleets += [
        FleetRecord(name=f, spec_hash="x", spec_json="{}", applied_at=T0, down=f in down)
        for f in extra_fleets
    ]
    if slots is None:
        slots = [slot(i, s.name) for s in specs for i in range(s.size)]
    return PlainSnapshot.of(fleets, slots, incarnations)


def run(
    specs: Iterable[FleetSpec],
    observations: Iterable[ZoneObservation],
    snap: PlainSnapshot | None = None,
    *,
    now: datetime = T0,
    policy: Policy | None = None,
    reported: frozenset[str] = frozenset(),
    deleting: DeletesInFlight = NO_DELETES,
    sent: CreatesSent = NO_CREATES_SENT,
) -> Plan:
    specs = list(specs)
    return plan(
        specs,
        observations,
        snap if snap is not None else snapshot(specs=specs),
        now,
        policy or Policy(),
        OWNER,
        reported=reported,
        deleting=deleting,
        sent=sent,
    )


def edges(p: Plan, incarnation_id: int | None = None) -> list[tuple[str, str]]:
    """The phase edges a plan proposes (for one incarnation if given)."""
    return [
        (a.expected.value, a.new.value)
        for a in p.of(Transition)
        if incarnation_id is None or a.incarnation_id == incarnation_id
    ]


def deletes(p: Plan) -> list[str]:
    return [a.node_name for a in p.of(DeleteNode)]


def kinds(p: Plan) -> list[str]:
    return [a.kind for a in p.actions]


def only(p: Plan, kind: type[Action]) -> list[Action]:
    return [a for a in p.actions if isinstance(a, kind)]
