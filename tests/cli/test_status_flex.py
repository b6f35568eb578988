"""`tpucared status` of a flex-start fleet (issue 28): a slot whose node waits for capacity
reads "waiting for flex-start capacity since T"; a READY one, the time left of its run
(JSON: `waiting_for_flex_start_since`, the node's `run_ends_at`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tpucared.core.model.records import FleetRecord, IncarnationRecord, NodePhase, SlotRecord
from tpucared.core.model.specs import CapacityKind, FleetSpec, NodeOptions
from tpucared.core.nodes.slots import spec_json
from tpucared.inspect.status import status_document, status_lines
from tpucared.store.snapshot import FleetStatus, SlotStatus

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
FLEX = FleetSpec(
    "flex", ("us-east5-a",), "ct6e-standard-4t", 1, {"runtime_version": ""},
    capacity=CapacityKind.FLEX_START, node=NodeOptions(max_run_duration_s=7 * 86400), api="compute",
)  # fmt: skip


def fleet(spec: FleetSpec, node: IncarnationRecord) -> FleetStatus:
    record = FleetRecord(spec.name, spec.spec_hash(), spec_json(spec), T0)
    slot = SlotStatus(SlotRecord(spec.name, 0, "r"), node, (), None)
    return FleetStatus(record, (slot,))


def node(phase: NodePhase, **kw: object) -> IncarnationRecord:
    return IncarnationRecord(
        id=1, fleet="flex", slot=0, node_name="flex-0", zone="us-east5-a",
        accelerator_type="ct6e-standard-4t", phase=phase, phase_since=T0,
        requested_at=T0 - timedelta(hours=3), api="compute", **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_flex_slot_waiting_for_capacity() -> None:
    f = fleet(FLEX, node(NodePhase.CREATING, cloud_state="PENDING"))
    [row] = [line for line in status_lines([f], T0) if line.startswith("flex ")]
    assert "waiting for flex-start capacity since 2026-11-26 09:00:00Z" in row
    [slot] = status_document([f], T0)["fleets"][0]["slots"]
    assert slot["waiting_for_flex_start_since"] == "2026-11-26T09:00:00Z"
    assert slot["node"]["run_ends_at"] is None


def test_a_ready_flex_slot_shows_the_time_left() -> None:
    ends = T0 + timedelta(days=6, hours=23, minutes=10)
    ready = node(NodePhase.READY, cloud_state="RUNNING", ready_at=T0, run_ends_at=ends)
    f = fleet(FLEX, ready)
    [row] = [line for line in status_lines([f], T0) if line.startswith("flex ")]
    assert "ready, run ends in 6d23h" in row
    [slot] = status_document([f], T0)["fleets"][0]["slots"]
    assert slot["node"]["run_ends_at"] == "2026-12-03T11:10:00Z"
    assert slot["waiting_for_flex_start_since"] is None


def test_a_spot_slot_creating_is_not_waiting_for_flex_capacity() -> None:
    spot = replace(FLEX, capacity=CapacityKind.SPOT, node=NodeOptions())
    f = fleet(spot, node(NodePhase.CREATING))
    [row] = [line for line in status_lines([f], T0) if line.startswith("flex ")]
    assert "flex-start" not in row
    assert " creating " in row
    [slot] = status_document([f], T0)["fleets"][0]["slots"]
    assert slot["waiting_for_flex_start_since"] is None
