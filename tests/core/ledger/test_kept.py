"""A slot's closed days (core/ledger/kept.py): which days are final, and kept days plus the
tiled tail summing to exactly the full recompute, while the history goes on: a crash, a
preemption wasting progress, and a running attempt across midnight whose later loss
reclassifies seconds of the day before (the days a naive "midnight passed" rule would keep)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tpucared.core.ledger.categories import Category as C
from tpucared.core.ledger.categories import NodeTimes, SlotHistory
from tpucared.core.ledger.cost import SlotSummary, summarize
from tpucared.core.ledger.kept import (
    DayKey,
    day_sums,
    final_until,
    midnight,
    totals,
)
from tpucared.core.ledger.tiling import clipped, slot_ledger
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import (
    AttemptOutcome,
    CreateAttemptRecord,
    WorkloadAttemptRecord,
)

D0 = datetime(2026, 11, 1, tzinfo=UTC)


def t(day: int, hour: float) -> datetime:
    return D0 + timedelta(days=day, hours=hour)


def node(i: int, requested: datetime, **times: datetime | LossCause) -> NodeTimes:
    return NodeTimes(i, "f-0", "us-east5-b", "v6e-8", requested, **times)  # type: ignore[arg-type]


def attempt(
    i: int, inc: int, start: datetime, end: datetime | None = None, **more: object
) -> WorkloadAttemptRecord:
    return WorkloadAttemptRecord(i, "f", 0, inc, i, start, end, **more)  # type: ignore[arg-type]


def create(start: datetime, outcome: str, inc: int) -> CreateAttemptRecord:
    return CreateAttemptRecord("f", 0, "us-east5-b", "v6e-8", start, outcome, incarnation_id=inc)


PROGRESS = {"first_step_at": t(0, 1.4), "last_step": 900, "last_step_at": t(0, 9.9),
            "last_checkpoint": 800, "last_checkpoint_at": t(0, 9)}  # fmt: skip

# Day 0: node 1 READY, attempt 1 crashes at 10:00 (checkpoint 9:00: an hour wasted), attempt 2
# on the same node until node 1 is preempted on day 1 at 06:00. A stockout, node 3 READY at
# 07:10, attempt 3 from 07:15 (checkpoint at 23:00), running across midnight: state A (day 2
# 03:00). State B (day 3 12:00): node 3 was preempted on day 2 at 05:00, which wastes attempt
# 3's progress since day 1 23:00; node 4 runs attempt 4 across the next midnight.
NODES_A = [
    node(1, t(0, 1), creating_at=t(0, 1.05), ready_at=t(0, 1.1), dead_at=t(1, 6),
         deleting_at=t(1, 6.03), deleted_at=t(1, 6.08), loss_cause=LossCause.PREEMPTED),
    node(2, t(1, 6.1), failed_at=t(1, 6.1)),
    node(3, t(1, 7), creating_at=t(1, 7.02), ready_at=t(1, 7.1)),
]  # fmt: skip
ATTEMPTS_A = [
    attempt(1, 1, t(0, 1.25), t(0, 10), outcome=AttemptOutcome.FAILED, **PROGRESS),
    attempt(2, 1, t(0, 10.1), t(1, 6.02), outcome=AttemptOutcome.PREEMPTED,
            first_step_at=t(0, 10.2), last_step=2000, last_step_at=t(1, 5.9),
            last_checkpoint=1900, last_checkpoint_at=t(1, 5)),
    attempt(3, 3, t(1, 7.25), None, first_step_at=t(1, 7.3), last_step=3000,
            last_step_at=t(2, 2.9), last_checkpoint=2500, last_checkpoint_at=t(1, 23)),
]  # fmt: skip
CREATES = [create(t(0, 1), "ok", 1), create(t(1, 6.1), "capacity", 2), create(t(1, 7), "ok", 3)]
A = SlotHistory("f", 0, nodes=NODES_A, attempts=ATTEMPTS_A, creates=CREATES)
NOW_A = t(2, 3)

NODES_B = [
    *NODES_A[:2],
    replace(NODES_A[2], dead_at=t(2, 5), deleting_at=t(2, 5.05), deleted_at=t(2, 5.1),
            loss_cause=LossCause.PREEMPTED),
    node(4, t(2, 6), creating_at=t(2, 6.02), ready_at=t(2, 6.1)),
]  # fmt: skip
ATTEMPTS_B = [
    *ATTEMPTS_A[:2],
    replace(ATTEMPTS_A[2], ended_at=t(2, 5.02), outcome=AttemptOutcome.PREEMPTED,
            last_step=3300, last_step_at=t(2, 4.9)),
    attempt(4, 4, t(2, 6.25), None, first_step_at=t(2, 6.3)),
]  # fmt: skip
B = SlotHistory("f", 0, nodes=NODES_B, attempts=ATTEMPTS_B,
                creates=[*CREATES, create(t(2, 6), "ok", 4)])  # fmt: skip
NOW_B = t(3, 12)


class Keeper:
    """The maintenance task's bookkeeping (runtime/ledger_days.py), in memory."""

    def __init__(self) -> None:
        self.until: datetime | None = None
        self.days: dict[DayKey, list[int]] = {}

    def keep(self, history: SlotHistory, now: datetime, until: datetime | None = None) -> None:
        assert history.first is not None
        start = self.until or history.first
        until = until or final_until(history, now)
        if until <= start:
            return
        self.days.update(day_sums(slot_ledger(history, now), start, until))
        self.until = until

    def summary(self, history: SlotHistory, now: datetime) -> SlotSummary:
        assert self.until is not None
        tail = clipped(slot_ledger(history, now), self.until, keep_steps=False)
        kept = totals((k, us, steps) for k, (us, steps) in self.days.items())
        return summarize("f", 0, tail, chips=4, price=0.54, kept=kept)


def full(history: SlotHistory, now: datetime) -> SlotSummary:
    return summarize("f", 0, slot_ledger(history, now), chips=4, price=0.54)


def test_days_are_final_only_before_what_can_still_change() -> None:
    # A: attempt 3 runs (since day 1 07:15): day 1 is not final though its midnight passed.
    assert final_until(A, NOW_A) == t(1, 0)
    # B: attempt 4 runs since day 2 06:15, the latest loss is day 2 05:00.
    assert final_until(B, NOW_B) == t(2, 0)
    # Never today, nor within the grace of now.
    calm = SlotHistory("f", 0, nodes=NODES_B[:3], attempts=ATTEMPTS_B[:3], creates=CREATES)
    assert final_until(calm, t(2, 0.5)) == t(1, 0)
    assert final_until(calm, t(9, 12)) == t(2, 0)  # the latest disruption: a done flip
    # A hold reaches back to its start.
    assert final_until(replace(calm, held_since=t(2, 7)), t(9, 12)) == t(2, 0)
    assert final_until(replace(calm, held_since=t(1, 7)), t(9, 12)) == t(1, 0)


def test_kept_days_and_the_tail_are_the_full_recompute_to_the_bit() -> None:
    keeper = Keeper()
    keeper.keep(A, NOW_A)
    assert keeper.until == t(1, 0)
    assert keeper.summary(A, NOW_A) == full(A, NOW_A)
    keeper.keep(B, NOW_B)
    assert keeper.until == t(2, 0)
    assert {k[0] for k in keeper.days} == {t(0, 0).date(), t(1, 0).date()}
    got, want = keeper.summary(B, NOW_B), full(B, NOW_B)
    assert got == want
    # Every figure the history has: the crash's and both losses' wasted progress and steps.
    # (Wasted: from each checkpoint to the loss, the cloud's time: 1 h + 1 h + 6 h.)
    assert want.seconds[C.WASTED] == 8 * 3600
    assert want.steps_lost == 100 + 100 + 800
    assert min(want.seconds[C.RECOVERY], want.seconds[C.CRASH_RESTART]) > 0
    assert min(want.causes[LossCause.PREEMPTED], want.causes[LossCause.CRASH]) > 0
    # Later passes, the slot done, its fleet down: the same figures both ways.
    keeper.keep(B, t(5, 0))
    assert keeper.summary(B, t(5, 0)) == full(B, t(5, 0))
    done = replace(B, done=True)
    assert keeper.summary(done, t(5, 0)) == full(done, t(5, 0))


def test_a_midnight_passing_is_not_enough() -> None:
    """Keeping day 1 at A (its midnight passed) would keep attempt 3's 23:00-24:00 as
    productive; B's loss makes it wasted progress."""
    naive = Keeper()
    naive.keep(A, NOW_A, until=midnight(NOW_A))
    naive.keep(B, NOW_B)
    assert naive.summary(B, NOW_B) != full(B, NOW_B)
    assert naive.summary(B, NOW_B).seconds[C.WASTED] == full(B, NOW_B).seconds[C.WASTED] - 3600
