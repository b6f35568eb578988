"""Upcoming maintenance read from both APIs' JSON (gcp/maintenance.py): the TPU API's
`Node.upcomingMaintenance` (v2 discovery document, schema `UpcomingMaintenance`), Compute
Engine's `Instance.resourceStatus.upcomingMaintenance` (google.cloud.compute_v1
`UpcomingMaintenance`), a slice's as its members' earliest; absent is None, a block of the
wrong shape MalformedResource (the zone's list is then MALFORMED)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tpucared.core.model.observed import MaintenanceWindow
from tpucared.gcp.compute.convert import instance_from_json
from tpucared.gcp.compute.observe import INSTANCE_LIST_FIELDS
from tpucared.gcp.compute.slices import slice_from_json
from tpucared.gcp.fields import MalformedResource
from tpucared.gcp.tpu.convert import node_from_json
from tpucared.gcp.tpu.observe import NODE_LIST_FIELDS

from .test_slices_convert import ZONE, four, member, mig

# A TPU API node as nodes.list sends it, less what this file does not read.
READY_POD: dict[str, Any] = {
    "name": f"projects/p/locations/{ZONE}/nodes/sweep-3",
    "acceleratorType": "v4-16",
    "state": "READY",
    "labels": {"tpucared-fleet": "sweep", "tpucared-owner": "d1"},
}

BLOCK = {
    "type": "SCHEDULED",
    "maintenanceStatus": "PENDING",
    "windowStartTime": "2026-12-01T10:00:00Z",
    "windowEndTime": "2026-12-01T11:00:00.5Z",
    "latestWindowStartTime": "2026-12-03T10:00:00Z",
    "canReschedule": True,
}
WINDOW = MaintenanceWindow(
    start=datetime(2026, 12, 1, 10, tzinfo=UTC),
    end=datetime(2026, 12, 1, 11, 0, 0, 500000, tzinfo=UTC),
    type="SCHEDULED",
    status="PENDING",
    can_reschedule=True,
)
MALFORMED: list[Any] = [
    "SCHEDULED",
    ["SCHEDULED"],
    {"windowStartTime": "next tuesday"},
    {"windowEndTime": 1764583200},
    {"type": 2},
    {"maintenanceStatus": ["PENDING"]},
    {"canReschedule": "yes"},
]


def tpu(block: object) -> MaintenanceWindow | None:
    return node_from_json(ZONE, {**READY_POD, "upcomingMaintenance": block}).maintenance


def instance(status: object) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "iron-0", "status": "RUNNING", "resourceStatus": status}
    return body


def test_both_lists_ask_for_it() -> None:
    assert "upcomingMaintenance" in NODE_LIST_FIELDS
    assert "resourceStatus(scheduling(terminationTimestamp),upcomingMaintenance)" in (
        INSTANCE_LIST_FIELDS
    )


def test_a_tpu_node_s_window() -> None:
    assert tpu(BLOCK) == WINDOW
    assert node_from_json(ZONE, READY_POD).maintenance is None
    assert tpu(None) is None
    assert tpu({}) is None


def test_a_compute_instance_s_window() -> None:
    node = instance_from_json(ZONE, instance({"upcomingMaintenance": BLOCK}))
    assert node.maintenance == WINDOW
    assert instance_from_json(ZONE, instance({})).maintenance is None
    assert instance_from_json(ZONE, {"name": "iron-0", "status": "RUNNING"}).maintenance is None


@pytest.mark.parametrize("block", MALFORMED)
def test_a_malformed_window_is_refused_by_both(block: object) -> None:
    with pytest.raises(MalformedResource):
        tpu(block)
    with pytest.raises(MalformedResource):
        instance_from_json(ZONE, instance({"upcomingMaintenance": block}))


def test_a_slice_s_window_is_its_members_earliest() -> None:
    later = {**BLOCK, "windowStartTime": "2026-12-02T10:00:00Z"}
    members = four()
    members[1] = member(2, worker=1, resourceStatus={"upcomingMaintenance": later})
    members[2] = member(3, worker=2, resourceStatus={"upcomingMaintenance": BLOCK})
    assert slice_from_json(ZONE, mig(), members).maintenance == WINDOW
    assert slice_from_json(ZONE, mig(), four()).maintenance is None
    members[3] = member(4, worker=3, resourceStatus={"upcomingMaintenance": {"type": 7}})
    with pytest.raises(MalformedResource):
        slice_from_json(ZONE, mig(), members)
