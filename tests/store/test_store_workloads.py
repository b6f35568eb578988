"""Workload attempts: numbering, one running attempt per slot, outcomes and counters."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_support import ENGINES, T0, facts

from tpucared.core.model.records import AttemptOutcome, IncarnationRecord, NodePhase
from tpucared.core.workload.actions import FinishAttempt, HeardNotice
from tpucared.core.workload.attempts import AttemptState, IllegalAttemptTransition
from tpucared.runtime.workload.notice_events import record_heard
from tpucared.store import AttemptRunning, NotFound, StaleWrite, Store

P = NodePhase
T1 = T0 + timedelta(minutes=1)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    """Every test of this module on SQLite and on PostgreSQL (conftest.py)."""
    return str(request.param)


async def ready_node(store: Store, slot: int = 0) -> IncarnationRecord:
    async with store.write() as tx:
        inc = await tx.request_node("sweep", slot, f"sweep-{slot}", "z", "v4-32", T0)
        return await tx.transition(inc.id, P.REQUESTED, P.READY, T0, cloud=facts(workers=4))


async def test_attempts_are_numbered_per_slot_and_counted(seeded: Store):
    inc = await ready_node(seeded)
    outcomes = [AttemptOutcome.FAILED, AttemptOutcome.HUNG, AttemptOutcome.SUCCEEDED]
    for number, outcome in enumerate(outcomes, start=1):
        async with seeded.write() as tx:
            started = await tx.start_attempt(inc.id, T0)
        assert (started.number, started.outcome, started.ended_at) == (number, None, None)
        assert (await seeded.load_snapshot()).running[("sweep", 0)] == started
        async with seeded.write() as tx:
            ended = await tx.finish_attempt(
                started.id, outcome, T1, exit_codes={0: 1, 1: None}, detail="exit 1 on worker 0"
            )
        assert (ended.outcome, ended.ended_at, ended.exit_codes) == (outcome, T1, {0: 1, 1: None})
    snap = await seeded.load_snapshot()
    slot = snap.slots[("sweep", 0)]
    # failed and hung count against the crash budget; success does not.
    assert (slot.attempts, slot.failures) == (3, 2)
    assert snap.running == {}
    assert snap.last_attempts[("sweep", 0)].number == 3
    kinds = [e.kind for e in await seeded.events() if e.kind.startswith("attempt.")]
    assert kinds == [
        "attempt.started",
        "attempt.failed",
        "attempt.started",
        "attempt.hung",
        "attempt.started",
        "attempt.succeeded",
    ]


async def test_one_running_attempt_per_slot(seeded: Store):
    inc = await ready_node(seeded)
    async with seeded.write() as tx:
        first = await tx.start_attempt(inc.id, T0)
    with pytest.raises(AttemptRunning) as err:
        async with seeded.write() as tx:
            await tx.start_attempt(inc.id, T1)
    assert err.value.actual == first.id
    # The refused attempt consumed no number.
    assert (await seeded.load_snapshot()).slots[("sweep", 0)].attempts == 1


async def test_finishing_twice_is_a_stale_write(seeded: Store):
    inc = await ready_node(seeded)
    async with seeded.write() as tx:
        attempt = await tx.start_attempt(inc.id, T0)
        await tx.finish_attempt(attempt.id, AttemptOutcome.FAILED, T1)
    with pytest.raises(StaleWrite):
        async with seeded.write() as tx:
            await tx.finish_attempt(attempt.id, AttemptOutcome.FAILED, T1)
    assert (await seeded.load_snapshot()).slots[("sweep", 0)].failures == 1
    with pytest.raises(NotFound):
        async with seeded.write() as tx:
            await tx.finish_attempt(999, AttemptOutcome.FAILED, T1)


async def test_launching_needs_a_ready_node(seeded: Store):
    async with seeded.write() as tx:
        inc = await tx.request_node("sweep", 0, "sweep-0", "z", "v4-32", T0)
    with pytest.raises(StaleWrite):
        async with seeded.write() as tx:
            await tx.start_attempt(inc.id, T0)
    with pytest.raises(NotFound):
        async with seeded.write() as tx:
            await tx.start_attempt(999, T0)


async def test_attempt_numbers_continue_across_incarnations(seeded: Store):
    first = await ready_node(seeded)
    async with seeded.write() as tx:
        attempt = await tx.start_attempt(first.id, T0)
        await tx.finish_attempt(attempt.id, AttemptOutcome.PREEMPTED, T1)
        await tx.transition(first.id, P.READY, P.DEAD, T1, end_reason="preempted")
        await tx.transition(first.id, P.DEAD, P.DELETED, T1)
    second = await ready_node(seeded)
    async with seeded.write() as tx:
        attempt = await tx.start_attempt(second.id, T1)
    assert (attempt.number, attempt.incarnation_id) == (2, second.id)
    assert (await seeded.load_snapshot()).slots[("sweep", 0)].failures == 0  # preempted: no


@pytest.mark.parametrize(
    ("finished", "expected", "outcome"),
    [
        (AttemptOutcome.SUCCEEDED, AttemptState.SUCCEEDED, AttemptOutcome.FAILED),
        (AttemptOutcome.CANCELLED, AttemptState.CANCELLED, AttemptOutcome.CANCELLED),
        (None, AttemptState.HUNG, AttemptOutcome.FAILED),  # the attempt still runs
    ],
    ids=["rewrite-outcome", "end-twice", "from-a-state-it-is-not-in"],
)
async def test_an_illegal_attempt_write_is_refused_and_changes_nothing(
    seeded: Store,
    finished: AttemptOutcome | None,
    expected: AttemptState,
    outcome: AttemptOutcome,
):
    inc = await ready_node(seeded)
    async with seeded.write() as tx:
        attempt = await tx.start_attempt(inc.id, T0)
        if finished is not None:
            attempt = await tx.finish_attempt(attempt.id, finished, T0, exit_codes={0: 0})
    last_event = (await seeded.events())[-1].id
    async with seeded.write() as tx:
        with pytest.raises(IllegalAttemptTransition) as err:
            await tx.finish_attempt(
                attempt.id, outcome, T1, exit_codes={0: 1}, detail="rewritten", expected=expected
            )
        # Refused before any write: not even this transaction sees a change.
        assert await tx.workload_attempt(attempt.id) == attempt
    assert (err.value.current, err.value.new) == (expected, AttemptState(outcome.value))
    async with seeded.read() as r:
        assert await r.workload_attempt(attempt.id) == attempt
    slot = (await seeded.load_snapshot()).slots[("sweep", 0)]
    assert (slot.attempts, slot.failures) == (1, 0)
    assert await seeded.events(since_id=last_event) == []  # no event either


async def test_a_stale_finish_names_the_states(seeded: Store):
    inc = await ready_node(seeded)
    async with seeded.write() as tx:
        attempt = await tx.start_attempt(inc.id, T0)
        await tx.finish_attempt(attempt.id, AttemptOutcome.HUNG, T1)
    with pytest.raises(StaleWrite) as err:
        async with seeded.write() as tx:
            await tx.finish_attempt(attempt.id, AttemptOutcome.FAILED, T1)
    assert (err.value.expected, err.value.actual) == (AttemptState.RUNNING, AttemptState.HUNG)


async def test_a_notice_is_recorded_once_by_whichever_path_heard_it_first(seeded: Store):
    """The notice watch and the attempt's end (a probe that read the notice first) both write
    `preemption.notice` with append_event_once: each node has exactly one, the first one's."""
    first, second = await ready_node(seeded, 0), await ready_node(seeded, 1)
    finishes = []
    for inc in (first, second):
        async with seeded.write() as tx:
            attempt = await tx.start_attempt(inc.id, T0)
        heard = HeardNotice(inc.id, inc.node_name, T0, None)
        finishes.append(
            FinishAttempt(fleet="sweep", slot=inc.slot, attempt_id=attempt.id, attempt=1,
                          outcome=AttemptOutcome.PREEMPTED, reason="r", notices=(heard,))
        )  # fmt: skip
    where = {"fleet": "sweep", "node": first.node_name, "incarnation_id": first.id}
    async with seeded.write() as tx:  # node 0: the watch first, then the attempt's end
        assert await tx.append_event_once("preemption.notice", "watch", T1, slot=0, **where)
        await record_heard(tx, finishes[0], T1)
    async with seeded.write() as tx:  # node 1: the attempt's end first, then the watch
        await record_heard(tx, finishes[1], T1)
        again = await tx.append_event_once(
            "preemption.notice", "watch", T1, fleet="sweep", slot=1, node=second.node_name,
            incarnation_id=second.id,
        )  # fmt: skip
        assert again is None
    events = [e for e in await seeded.events(limit=50) if e.kind == "preemption.notice"]
    by_node = {e.node: e for e in events}
    assert len(events) == 2
    assert set(by_node) == {first.node_name, second.node_name}
    assert by_node[first.node_name].message == "watch"
    probe_words = by_node[second.node_name]
    assert probe_words.message.startswith(f"{second.node_name}: preemption notice on sweep/1")
    assert probe_words.details["heard_by"] == "probe"
    assert probe_words.details["notice_at"] == T0.isoformat()
