"""Node incarnations: intent, compare-and-set transitions, events in the same transaction,
the one-live-incarnation rule, deletes, call outcomes, cloud facts, adoption and workers."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import timedelta

import pytest
from store_support import ENGINES, SQLITE_ONLY, T0, facts, open_raw, seed, slot_update

from tpucared.core.model.lifecycle import TRANSITIONS
from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import ErrorKind
from tpucared.core.nodes.flex import RUN_ENDED
from tpucared.core.vocab.actions import CloudFacts, RecordCloud
from tpucared.store import (
    IllegalTransition,
    LiveIncarnationExists,
    NotFound,
    StaleWrite,
    Store,
)

P = NodePhase
T1 = T0 + timedelta(minutes=1)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    """Every test of this module on SQLite and on PostgreSQL (conftest.py)."""
    return str(request.param)


async def request(store: Store, slot: int = 0, zone: str = "z-a") -> IncarnationRecord:
    async with store.write() as tx:
        return await tx.request_node("sweep", slot, f"sweep-{slot}", zone, "v4-32", T0)


async def node_events(store: Store, incarnation_id: int) -> list[tuple[str, str | None]]:
    async with store.read() as r:
        events = await r.events(since_id=0, limit=1000, incarnation_id=incarnation_id)
    return [(e.kind, e.details.get("to")) for e in events]  # type: ignore[misc]


async def test_request_records_intent_with_an_event(seeded: Store):
    inc = await request(seeded)
    assert (inc.phase, inc.phase_since, inc.requested_at) == (P.REQUESTED, T0, T0)
    assert (inc.node_name, inc.zone, inc.accelerator_type) == ("sweep-0", "z-a", "v4-32")
    assert await node_events(seeded, inc.id) == [("node.requested", "requested")]
    snap = await seeded.load_snapshot()
    assert snap.nodes == {("sweep", 0, 0): inc}


async def test_a_second_live_incarnation_for_a_slot_is_refused(seeded: Store):
    first = await request(seeded)
    with pytest.raises(LiveIncarnationExists) as err:
        await request(seeded)
    assert err.value.actual == first.id
    # Still refused while the first is dead or being deleted...
    async with seeded.write() as tx:
        await tx.transition(first.id, P.REQUESTED, P.DEAD, T1, end_reason="preempted")
    with pytest.raises(LiveIncarnationExists):
        await request(seeded, zone="z-b")
    # ...and allowed once it is gone.
    async with seeded.write() as tx:
        await tx.transition(first.id, P.DEAD, P.DELETED, T1)
    second = await request(seeded)
    assert second.id > first.id


def test_the_database_itself_refuses_a_second_live_incarnation(migrated):
    """The partial unique index holds even for writers that skip the application's check."""
    conn = open_raw(migrated)
    conn.executescript(
        "INSERT INTO fleets VALUES ('f', 'h', '{}', '2025-01-01 00:00:00', 0);"
        "INSERT INTO slots (fleet, slot, run_id, created_at) VALUES ('f', 0, 'r', '2025-01-01');"
    )
    insert = (
        "INSERT INTO nodes (fleet, slot, node_name, zone, accelerator_type, phase, phase_since,"
        " requested_at) VALUES ('f', 0, 'f-0', ?, 'v4-8', ?, '2025-01-01', '2025-01-01')"
    )
    conn.execute(insert, ("z-a", "failed"))
    conn.execute(insert, ("z-a", "deleted"))
    conn.execute(insert, ("z-a", "ready"))
    for phase in ("requested", "creating", "ready", "dead", "deleting"):
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            conn.execute(insert, ("z-b", phase))
    conn.close()


async def test_cas_refuses_a_stale_transition(seeded: Store):
    """Two writers read the same phase; the second one's write finds it changed."""
    inc = await request(seeded)
    seen_by_a = seen_by_b = (await seeded.load_snapshot()).nodes[("sweep", 0, 0)]
    async with seeded.write() as tx:
        await tx.transition(seen_by_a.id, seen_by_a.phase, P.CREATING, T1, operation="op-1")
    with pytest.raises(StaleWrite) as err:
        async with seeded.write() as tx:
            await tx.transition(seen_by_b.id, seen_by_b.phase, P.FAILED, T1)
    assert (err.value.expected, err.value.actual) == (P.REQUESTED, P.CREATING)
    after = await seeded.incarnation(inc.id)
    assert after is not None
    assert (after.phase, after.operation) == (P.CREATING, "op-1")
    # The event exists for the committed transition only.
    assert await node_events(seeded, inc.id) == [
        ("node.requested", "requested"),
        ("node.creating", "creating"),
    ]


# How to reach each phase from REQUESTED.
PATHS = {
    P.REQUESTED: [],
    P.CREATING: [P.CREATING],
    P.READY: [P.READY],
    P.DEAD: [P.DEAD],
    P.DELETING: [P.DEAD, P.DELETING],
    P.DELETED: [P.DEAD, P.DELETED],
    P.FAILED: [P.FAILED],
}


async def test_illegal_transitions_raise_and_write_nothing(store: Store):
    """Every edge missing from the lifecycle table, from an incarnation really in that phase."""
    await seed(store, "sweep", len(P), T0)
    illegal = 0
    for slot, current in enumerate(P):
        async with store.write() as tx:
            inc = await tx.request_node("sweep", slot, f"sweep-{slot}", "z", "v4-8", T0)
            phase = P.REQUESTED
            for step in PATHS[current]:
                await tx.transition(inc.id, phase, step, T0)
                phase = step
        before = await node_events(store, inc.id)
        for new in P:
            if new in TRANSITIONS[current]:
                continue
            illegal += 1
            with pytest.raises(IllegalTransition):
                async with store.write() as tx:
                    await tx.transition(inc.id, current, new, T1)
            after = await store.incarnation(inc.id)
            assert after is not None
            assert after.phase is current
            assert await node_events(store, inc.id) == before
    assert illegal == len(P) ** 2 - sum(len(v) for v in TRANSITIONS.values())


async def test_the_event_exists_iff_the_transition_committed(seeded: Store):
    inc = await request(seeded)

    async def crashing_block() -> None:
        async with seeded.write() as tx:
            await tx.transition(inc.id, P.REQUESTED, P.CREATING, T1)
            raise RuntimeError("crash before commit")

    with pytest.raises(RuntimeError):
        await crashing_block()
    assert await node_events(seeded, inc.id) == [("node.requested", "requested")]
    assert (await seeded.incarnation(inc.id)).phase is P.REQUESTED  # type: ignore[union-attr]


async def test_unknown_incarnations_are_not_found(seeded: Store):
    with pytest.raises(NotFound):
        async with seeded.write() as tx:
            await tx.transition(999, P.REQUESTED, P.CREATING, T1)
    with pytest.raises(NotFound):
        async with seeded.write() as tx:
            await tx.request_node("sweep", 7, "sweep-7", "z", "v4-8", T0)


async def test_a_transition_stamps_times_clears_errors_and_applies_its_slot_update(seeded: Store):
    inc = await request(seeded)
    async with seeded.write() as tx:
        await tx.record_outcome(
            inc.id, P.REQUESTED, T0, error=ErrorKind.CAPACITY, last_error="no capacity in z-a"
        )
    assert (await seeded.load_snapshot()).slots[("sweep", 0)].last_error == "no capacity in z-a"
    t2 = T1 + timedelta(seconds=5)
    async with seeded.write() as tx:
        failed = await tx.transition(
            inc.id,
            P.REQUESTED,
            P.FAILED,
            t2,
            reason="sweep-0: no capacity in z-a, trying z-b",
            slot_update=slot_update(
                "sweep", 0, create_failures=1, last_error="capacity", next_create_at=t2
            ),
        )
    assert (failed.phase, failed.phase_since, failed.error) == (P.FAILED, t2, None)
    slot = (await seeded.load_snapshot()).slots[("sweep", 0)]
    assert (slot.create_failures, slot.next_create_at, slot.last_error) == (1, t2, "capacity")
    last = (await seeded.events())[-1]
    assert last.message == "sweep-0: no capacity in z-a, trying z-b"
    assert last.details["slot_update"]["create_failures"] == 1  # type: ignore[index]


async def test_a_slot_update_must_be_for_the_incarnations_slot(seeded: Store):
    inc = await request(seeded)
    with pytest.raises(ValueError, match="slot update"):
        async with seeded.write() as tx:
            await tx.transition(
                inc.id, P.REQUESTED, P.FAILED, T1, slot_update=slot_update("sweep", 1)
            )


async def test_preemptions_are_counted_with_the_transition(seeded: Store):
    for _ in range(2):
        inc = await request(seeded)
        async with seeded.write() as tx:
            await tx.transition(inc.id, P.REQUESTED, P.READY, T0, cloud=facts())
            await tx.transition(
                inc.id,
                P.READY,
                P.DEAD,
                T1,
                end_reason="preempted",
                slot_update=slot_update("sweep", 0, add_preemptions=1),
            )
            await tx.transition(inc.id, P.DEAD, P.DELETED, T1)
    assert (await seeded.load_snapshot()).slots[("sweep", 0)].preemptions == 2


async def test_begin_delete_moves_to_deleting_and_counts_calls(seeded: Store):
    inc = await request(seeded)
    async with seeded.write() as tx:
        await tx.transition(inc.id, P.REQUESTED, P.READY, T0, cloud=facts())
        await tx.record_outcome(inc.id, P.READY, T0, error=ErrorKind.TRANSIENT)
    async with seeded.write() as tx:
        first = await tx.begin_delete(inc.id, P.READY, T1, end_reason="scale-down")
    assert (first.phase, first.delete_calls, first.last_delete_at) == (P.DELETING, 1, T1)
    assert (first.dead_at, first.end_reason, first.error) == (T1, "scale-down", None)
    t2 = T1 + timedelta(minutes=15)
    async with seeded.write() as tx:
        await tx.record_outcome(inc.id, P.DELETING, t2, operation="op-del")
        again = await tx.begin_delete(inc.id, P.DELETING, t2)
    assert (again.phase, again.delete_calls, again.last_delete_at) == (P.DELETING, 2, t2)
    assert (again.phase_since, again.dead_at, again.end_reason) == (T1, T1, "scale-down")
    with pytest.raises(StaleWrite):
        async with seeded.write() as tx:
            await tx.begin_delete(inc.id, P.READY, t2)
    async with seeded.write() as tx:
        gone = await tx.transition(inc.id, P.DELETING, P.DELETED, t2)
    assert (gone.deleted_at, gone.operation) == (t2, None)  # terminal: nothing in flight
    kinds = [k for k, _ in await node_events(seeded, inc.id)]
    assert kinds == [
        "node.requested",
        "node.ready",
        "node.outcome",
        "node.deleting",
        "node.outcome",
        "node.deleting",
        "node.deleted",
    ]


async def test_record_cloud_writes_only_changes(seeded: Store):
    inc = await request(seeded)
    async with seeded.write() as tx:
        await tx.transition(inc.id, P.REQUESTED, P.READY, T0, cloud=facts(workers=2))
    n_events = len(await seeded.events())
    async with seeded.write() as tx:
        same = await tx.record_cloud(inc.id, P.READY, facts(workers=2), T1)
    assert len(await seeded.events()) == n_events  # unchanged: no write, no event
    assert same.cloud_state == "READY"
    repairing = facts("REPAIRING", T1, health="UNHEALTHY_MAINTENANCE")
    async with seeded.write() as tx:
        changed = await tx.record_cloud(inc.id, P.READY, repairing, T1, reason="repairing")
    assert (changed.cloud_state, changed.cloud_state_since, changed.health) == (
        "REPAIRING",
        T1,
        "UNHEALTHY_MAINTENANCE",
    )
    event = (await seeded.events())[-1]
    assert (event.kind, event.message) == ("node.cloud", "repairing")
    # Workers were left alone (endpoints None).
    assert len((await seeded.load_snapshot()).workers[inc.id]) == 2
    with pytest.raises(StaleWrite):
        async with seeded.write() as tx:
            await tx.record_cloud(inc.id, P.CREATING, facts(), T1)


async def test_adopt_records_a_found_node_in_its_phase(seeded: Store):
    async with seeded.write() as tx:
        inc = await tx.adopt(
            "sweep",
            1,
            "sweep-1",
            "z-b",
            "v4-32",
            P.READY,
            facts(workers=4),
            T0,
            reason="adopting sweep-1 found READY",
        )
    assert (inc.phase, inc.cloud_id, inc.ready_at) == (P.READY, "4242", T0)
    assert await node_events(seeded, inc.id) == [
        ("node.requested", "requested"),
        ("node.ready", "ready"),
    ]
    with pytest.raises(LiveIncarnationExists):
        async with seeded.write() as tx:
            await tx.adopt("sweep", 1, "sweep-1", "z-b", "v4-32", P.READY, facts(), T1)
    async with seeded.write() as tx:
        pending = await tx.adopt(
            "sweep", 2, "sweep-2", "z-b", "v4-32", P.REQUESTED, facts("QUEUED:ACCEPTED", T0), T0
        )
    assert (pending.phase, pending.cloud_state) == (P.REQUESTED, "QUEUED:ACCEPTED")


async def test_workers_follow_endpoints_and_keep_pinned_keys(seeded: Store):
    inc = await request(seeded)
    async with seeded.write() as tx:
        await tx.transition(inc.id, P.REQUESTED, P.READY, T0, cloud=facts(workers=3))
        await tx.pin_host_keys(inc.id, 0, ["ssh-ed25519 AAA0", "ecdsa-sha2-nistp256 BBB0"])
        await tx.pin_host_keys(inc.id, 1, ["ssh-ed25519 AAA1"])
        # The same keys again: fine. Different keys: refused.
        await tx.pin_host_keys(inc.id, 1, ["ssh-ed25519 AAA1"])
    with pytest.raises(StaleWrite):
        async with seeded.write() as tx:
            await tx.pin_host_keys(inc.id, 1, ["ssh-ed25519 EVIL"])
    moved = (
        WorkerEndpoint(0, "10.0.0.1", "34.1.1.1"),  # same host, new external IP: keys kept
        WorkerEndpoint(1, "10.9.9.9", None),  # a different host: keys dropped
    )
    async with seeded.write() as tx:
        workers = await tx.set_workers(inc.id, moved)
    assert [(w.index, w.internal_ip, w.external_ip, w.host_keys) for w in workers] == [
        (0, "10.0.0.1", "34.1.1.1", ("ecdsa-sha2-nistp256 BBB0", "ssh-ed25519 AAA0")),
        (1, "10.9.9.9", None, ()),
    ]
    with pytest.raises(NotFound):
        async with seeded.write() as tx:
            await tx.pin_host_keys(inc.id, 2, ["ssh-ed25519 X"])  # worker 2 is gone


@SQLITE_ONLY
async def test_events_are_append_only_in_the_database(seeded: Store, migrated):
    conn = open_raw(migrated)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE events SET message = 'rewritten'")
    conn.close()


async def test_record_clouds_batches_a_tick_and_skips_stale_actions(seeded: Store):
    incs = [await request(seeded, slot) for slot in range(3)]
    async with seeded.write() as tx:
        for inc in incs[:2]:
            await tx.transition(inc.id, P.REQUESTED, P.READY, T0, cloud=facts(workers=2))
    n_events = len(await seeded.events(limit=1000))

    def action(inc: IncarnationRecord, expected: NodePhase, cloud: CloudFacts) -> RecordCloud:
        return RecordCloud(
            reason=f"{inc.node_name} seen",
            incarnation_id=inc.id,
            node_name=inc.node_name,
            expected=expected,
            cloud=cloud,
        )

    actions = [
        action(incs[0], P.READY, facts(workers=2)),  # unchanged: no write
        action(incs[1], P.READY, facts("READY", T1, health="TIMEOUT", workers=2)),  # changed
        action(incs[2], P.READY, facts()),  # stale: it is still REQUESTED
    ]
    async with seeded.write() as tx:
        done = await tx.record_clouds(actions, T1)
    assert [i.id for i in done.changed] == [incs[1].id]
    assert done.stale == (incs[2].id,)
    events = (await seeded.events(limit=1000))[n_events:]
    assert [(e.kind, e.message) for e in events] == [("node.cloud", "sweep-1 seen")]
    assert (await seeded.incarnation(incs[1].id)).health == "TIMEOUT"  # type: ignore[union-attr]
    unknown = RecordCloud(
        reason="x", incarnation_id=999, node_name="x", expected=P.READY, cloud=facts()
    )
    with pytest.raises(NotFound):
        async with seeded.write() as tx:
            await tx.record_clouds([unknown], T1)


async def test_outcome_events_say_what_was_learnt_never_the_keep_sentinel(seeded: Store):
    inc = await request(seeded)
    async with seeded.write() as tx:
        await tx.record_outcome(inc.id, P.REQUESTED, T0, last_error="quota exhausted")
        await tx.record_outcome(inc.id, P.REQUESTED, T0, operation="op-1")
        await tx.record_outcome(inc.id, P.REQUESTED, T0, operation=None)
        await tx.record_outcome(inc.id, P.REQUESTED, T0, error=ErrorKind.QUOTA)
    messages = [e.message for e in await seeded.events() if e.kind == "node.outcome"]
    assert messages == [
        "sweep-0: last error: quota exhausted",
        "sweep-0: operation op-1 in flight",
        "sweep-0: operation finished",
        "sweep-0: error quota",
    ]
    assert not any("KEEP" in m for m in messages)


async def test_a_flex_start_run_end_has_its_own_event(seeded: Store):
    """A transition ended "run ended" (core/nodes/flex.py) also appends `node.run_ended`,
    with the planned end: its own event, which the metrics count."""
    inc = await request(seeded)
    ends = T0 + timedelta(days=7)
    async with seeded.write() as tx:
        await tx.transition(inc.id, P.REQUESTED, P.CREATING, T1)
        await tx.transition(
            inc.id,
            P.CREATING,
            P.READY,
            T1,
            cloud=replace(facts("RUNNING", T1), run_ends_at=ends),
        )
        await tx.transition(inc.id, P.READY, P.DEAD, T1, end_reason=RUN_ENDED)  # fmt: skip
    assert (await node_events(seeded, inc.id))[-2:] == [
        ("node.dead", "dead"),
        ("node.run_ended", None),
    ]
    async with seeded.read() as r:
        [event] = [e for e in await r.events(since_id=0, limit=100) if e.kind == "node.run_ended"]
    assert event.details == {"run_ends_at": ends.isoformat()}
    assert "the flex-start run ended" in event.message
