"""Reads: the planner's snapshot, status, events, fleets and slots, and index use."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from store_support import ENGINES, T0, facts, open_raw, seed

from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, NodePhase
from tpucared.store import NotFound, Store

P = NodePhase
T1 = T0 + timedelta(minutes=1)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    """Every test of this module on SQLite and on PostgreSQL (conftest.py)."""
    return str(request.param)


async def populate(store: Store) -> dict[str, int]:
    """sweep/0 READY with a running attempt, sweep/1 FAILED then REQUESTED again, sweep/2
    never requested; fleet eval with one slot and a deleted node."""
    await seed(store, "eval", 1, T0)
    async with store.write() as tx:
        a = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-32", T0)
        a = await tx.transition(a.id, P.REQUESTED, P.READY, T0, cloud=facts(workers=2))
        attempt = await tx.start_attempt(a.id, T1)
        b = await tx.request_node("sweep", 1, "sweep-1", "z-a", "v4-32", T0)
        await tx.record_create_attempt(
            CreateAttemptRecord("sweep", 1, "z-a", "v4-32", T0, "capacity", 3.5, "stockout", b.id)
        )
        await tx.transition(b.id, P.REQUESTED, P.FAILED, T0)
        b2 = await tx.request_node("sweep", 1, "sweep-1", "z-b", "v4-32", T1)
        e = await tx.request_node("eval", 0, "eval-0", "z-a", "v4-8", T0)
        await tx.transition(e.id, P.REQUESTED, P.READY, T0)
        evaluation = await tx.start_attempt(e.id, T0)
        await tx.finish_attempt(evaluation.id, AttemptOutcome.CANCELLED, T1)
        await tx.begin_delete(e.id, P.READY, T1)
        await tx.transition(e.id, P.DELETING, P.DELETED, T1)
    return {"a": a.id, "b": b.id, "b2": b2.id, "e": e.id, "attempt": attempt.id}


async def test_snapshot_is_the_planners_view(seeded: Store):
    ids = await populate(seeded)
    snap = await seeded.load_snapshot()
    assert set(snap.fleets) == {"sweep", "eval"}
    assert sorted(snap.slots) == [("eval", 0), ("sweep", 0), ("sweep", 1), ("sweep", 2)]
    assert [s.index for s in snap.slots_of("sweep")] == [0, 1, 2]
    # Live incarnations only: not the failed one, not the deleted one.
    assert {k: n.id for k, n in snap.nodes.items()} == {
        ("sweep", 0, 0): ids["a"],
        ("sweep", 1, 0): ids["b2"],
    }
    assert [w.internal_ip for w in snap.workers_of(ids["a"])] == ["10.0.0.1", "10.0.0.2"]
    assert set(snap.workers) == {ids["a"]}
    assert {k: a.id for k, a in snap.running.items()} == {("sweep", 0): ids["attempt"]}
    assert snap.last_attempts[("eval", 0)].outcome is AttemptOutcome.CANCELLED
    assert snap.last_creates[("sweep", 1)].outcome == "capacity"
    assert snap.last_event_id == (await seeded.events())[-1].id
    with pytest.raises(TypeError):
        snap.nodes[("sweep", 9, 0)] = snap.nodes[("sweep", 0, 0)]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.last_event_id = 0  # type: ignore[misc]


async def test_status_shows_the_current_or_latest_incarnation_per_slot(seeded: Store):
    ids = await populate(seeded)
    status = {f.fleet.name: f for f in await seeded.status()}
    sweep = status["sweep"].slots
    assert [s.slot.index for s in sweep] == [0, 1, 2]
    assert sweep[0].node is not None
    assert sweep[0].node.id == ids["a"]
    assert len(sweep[0].workers) == 2
    assert sweep[0].last_attempt is not None
    assert sweep[0].last_attempt.id == ids["attempt"]
    assert sweep[1].node is not None
    assert sweep[1].node.id == ids["b2"]
    assert (sweep[2].node, sweep[2].workers, sweep[2].last_attempt) == (None, (), None)
    evaluation = status["eval"].slots[0]
    assert evaluation.node is not None
    assert evaluation.node.phase is P.DELETED
    only_eval = await seeded.status("eval")
    assert [f.fleet.name for f in only_eval] == ["eval"]


async def test_events_tail_and_follow(seeded: Store):
    await populate(seeded)
    every = await seeded.events(limit=1000)
    ids = [e.id for e in every]
    assert ids == sorted(ids) == list(range(1, len(ids) + 1))
    assert [e.id for e in await seeded.events(limit=3)] == ids[-3:]  # the newest, oldest first
    assert [e.id for e in await seeded.events(since_id=2, limit=3)] == [3, 4, 5]
    assert await seeded.events(since_id=ids[-1]) == []
    evals = await seeded.events(limit=1000, fleet="eval")
    assert evals
    assert all(e.fleet == "eval" for e in evals)
    assert {e.kind for e in evals} >= {"node.requested", "node.ready", "node.deleted"}


async def test_fleet_records_and_down(store: Store):
    async with store.write() as tx:
        first = await tx.record_fleet("sweep", "h1", '{"size": 2}', T0)
        same = await tx.record_fleet("sweep", "h1", '{"size": 2}', T1)
        changed = await tx.record_fleet("sweep", "h2", '{"size": 3}', T1)
        down = await tx.set_fleet_down("sweep", True, T1)
        again = await tx.record_fleet("sweep", "h3", '{"size": 4}', T1)
    assert (first.applied_at, same.applied_at, changed.applied_at) == (T0, T0, T1)
    assert (down.down, again.down, again.spec_hash) == (True, True, "h3")  # down is kept
    kinds = [e.kind for e in await store.events()]
    assert kinds == ["fleet.recorded", "fleet.recorded", "fleet.down", "fleet.recorded"]
    with pytest.raises(NotFound):
        async with store.write() as tx:
            await tx.set_fleet_down("nope", True, T1)


async def test_slots_get_a_run_id_once(store: Store):
    await seed(store, "sweep", 2, T0)
    before = {s.index: s.run_id for s in (await store.load_snapshot()).slots.values()}
    await seed(store, "sweep", 4, T1)  # grow
    after = {s.index: s.run_id for s in (await store.load_snapshot()).slots.values()}
    assert after[0] == before[0]
    assert after[1] == before[1]
    assert len(set(after.values())) == 4
    assert after[3].startswith("sweep-3-")
    async with store.write() as tx:
        slot = await tx.update_slot("sweep", 3, T1, done=True, next_zone="z-b")
    assert (slot.done, slot.next_zone) == (True, "z-b")
    assert (await store.events())[-1].kind == "slot.done"


def test_hot_queries_use_their_indexes(migrated):
    """The live-incarnation query must use the partial index, the event follow its index."""
    conn = open_raw(migrated)
    from tpucared.store.models import LIVE_NODE_SQL

    plan = " ".join(
        r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN SELECT * FROM nodes WHERE {LIVE_NODE_SQL}")
    )
    assert "uq_nodes_live_slice" in plan or "uq_nodes_live_name" in plan, plan
    plan = " ".join(
        r[3]
        for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM events WHERE fleet = 'x' AND id > 5 ORDER BY id"
        )
    )
    assert "ix_events_fleet_id" in plan, plan
    conn.close()


async def test_snapshot_reuses_the_records_of_unchanged_rows_only(seeded: Store) -> None:
    # The record cache (store/cache.py): nothing written, the same snapshot; something
    # written, a new one that shares the records of the rows that did not change, and equals
    # what an uncached read (a write transaction's) returns.
    ids = await populate(seeded)
    first = await seeded.load_snapshot()
    again = await seeded.load_snapshot()
    assert again is first
    assert seeded.records.snapshot_hits == 1

    async with seeded.write() as tx:
        await tx.record_cloud(ids["a"], P.READY, facts(state="REPAIRING"), T1)
        await tx.pin_host_keys(ids["a"], 1, ("ssh-ed25519 AAAAkey",))
    changed = await seeded.load_snapshot()
    assert seeded.records.snapshot_hits == 1  # the counter moved: read again
    assert seeded.records.snapshot_updates == 1  # only the rows that changed (changes.py)
    assert changed.nodes[("sweep", 0, 0)].cloud_state == "REPAIRING"
    assert changed.nodes[("sweep", 1, 0)] is first.nodes[("sweep", 1, 0)]
    assert changed.slots[("sweep", 2)] is first.slots[("sweep", 2)]
    assert changed.workers[ids["a"]][0] == first.workers[ids["a"]][0]  # its node changed
    assert changed.workers[ids["a"]][1].host_keys == ("ssh-ed25519 AAAAkey",)
    assert changed.running[("sweep", 0)] is first.running[("sweep", 0)]
    assert changed.last_event_id > first.last_event_id
    async with seeded.write() as tx:  # a write transaction's reader has no cache
        uncached = await tx.snapshot()
    assert changed == uncached

    # A notice is an event only: the same snapshot, with the newest event id.
    async with seeded.write() as tx:
        await tx.append_event("notice", "hello", T1)
    noticed = await seeded.load_snapshot()
    assert seeded.records.snapshot_hits == 2
    assert noticed.nodes is changed.nodes
    assert noticed.last_event_id == changed.last_event_id + 1
