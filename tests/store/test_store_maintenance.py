"""A node's next maintenance window on its record (migration 0011): written with the cloud facts
by `record_cloud` and `cas_many` alike, read back as the core value, and one
`node.maintenance_scheduled` event each time a window appears or moves (core/nodes/maintenance.py),
none for a status change or the window's end."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from store_support import ENGINES, T0, facts

from tpucared.core.model.observed import MaintenanceWindow
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.vocab.actions import RecordCloud
from tpucared.store import Store

START = T0 + timedelta(days=3)
WINDOW = MaintenanceWindow(START, START + timedelta(hours=1), "SCHEDULED", "PENDING", True)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _node(store: Store) -> IncarnationRecord:
    async with store.write() as tx:
        return await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-32", T0)


async def _scheduled(store: Store, inc: IncarnationRecord) -> list[dict[str, object]]:
    async with store.read() as r:
        events = await r.events(since_id=0, limit=1000, incarnation_id=inc.id)
    return [e.details for e in events if e.kind == "node.maintenance_scheduled"]


async def test_a_window_is_recorded_and_announced_once(seeded: Store):
    inc = await _node(seeded)
    for window in (
        WINDOW,
        WINDOW,  # unchanged: nothing written
        replace(WINDOW, status="ONGOING"),  # the window began: no new announcement
        replace(WINDOW, status="ONGOING", start=START + timedelta(hours=2)),  # moved
        None,  # over
    ):
        async with seeded.write() as tx:
            inc = await tx.record_cloud(
                inc.id, inc.phase, replace(facts("READY"), maintenance=window), T0
            )
        assert inc.maintenance == window
        [back] = (await seeded.load_snapshot()).nodes.values()
        assert back.maintenance == window
    details = await _scheduled(seeded, inc)
    assert [(d["start"], d["type"]) for d in details] == [
        (START.isoformat(), "SCHEDULED"),
        ((START + timedelta(hours=2)).isoformat(), "SCHEDULED"),
    ]
    assert details[0]["end"] == (START + timedelta(hours=1)).isoformat()


async def test_cas_many_announces_as_record_cloud_does(seeded: Store):
    inc = await _node(seeded)
    action = RecordCloud(
        reason="",
        incarnation_id=inc.id,
        node_name=inc.node_name,
        expected=inc.phase,
        cloud=replace(facts("READY"), maintenance=WINDOW),
    )
    async with seeded.write() as tx:
        [written] = await tx.cas_many([action], T0)
    assert isinstance(written, IncarnationRecord)
    assert written.maintenance == WINDOW
    assert len(await _scheduled(seeded, inc)) == 1
