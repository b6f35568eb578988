"""The ledger with the workload's progress file (core/ledger/tiling.py): startup split from
training, wasted progress in seconds and steps at a loss or a crash, with its cause; without
one, nothing changes (test_ledger.py); whatever the records, the tiling stays exact."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.ledger.test_ledger import (
    T0,
    at,
    attempt,
    create,
    histories,
    node,
    preempted_and_replaced,
    slot_history,
    table,
)
from tpucared.core.ledger.categories import Category as C
from tpucared.core.ledger.categories import Phase as P
from tpucared.core.ledger.categories import SlotHistory
from tpucared.core.ledger.cost import summarize
from tpucared.core.ledger.tiling import slot_ledger
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome, WorkloadAttemptRecord


def told(a: WorkloadAttemptRecord, first: float, step: int, step_at: float,
         checkpoint: int | None = None, checkpoint_at: float | None = None
         ) -> WorkloadAttemptRecord:  # fmt: skip
    return replace(
        a,
        first_step_at=at(first),
        last_step=step,
        last_step_at=at(step_at),
        last_checkpoint=checkpoint,
        last_checkpoint_at=at(checkpoint_at) if checkpoint_at is not None else None,
    )


def test_a_preemption_wastes_the_progress_since_the_last_checkpoint() -> None:
    history = slot_history(
        nodes=preempted_and_replaced(),
        attempts=[
            told(attempt(1, 1, 130, 1030, AttemptOutcome.PREEMPTED), 200, 95, 990, 80, 800),
            told(attempt(2, 2, 1450), 1500, 120, 1900),
        ],
        creates=[create(0, "ok", 1), create(1100, "ok", 2)],
    )
    ledger = slot_ledger(history, at(2000))
    assert table(ledger) == [
        (0, 100, C.STARTUP, P.PROVISIONING),
        (100, 130, C.STARTUP, P.SETUP),
        (130, 200, C.PROGRAM_STARTUP, None),
        (200, 800, C.PRODUCTIVE, None),
        # From the last checkpoint to the cloud's loss: thrown away.
        (800, 1000, C.WASTED, None),
        (1000, 1100, C.RECOVERY, P.DELETE),
        (1100, 1400, C.RECOVERY, P.PROVISIONING),
        (1400, 1450, C.RECOVERY, P.SETUP),
        (1450, 1500, C.PROGRAM_STARTUP, None),
        (1500, 2000, C.PRODUCTIVE, None),
    ]
    (wasted,) = [i for i in ledger if i.category is C.WASTED]
    assert (wasted.cause, wasted.steps, wasted.node) == (LossCause.PREEMPTED, 15, "n-1")
    summary = summarize("f", 0, ledger)
    assert summary.steps_lost == 15
    assert summary.causes[LossCause.PREEMPTED] == 200 + 100 + 300 + 50


def test_a_crash_wastes_since_the_first_step_without_a_checkpoint() -> None:
    history = slot_history(
        nodes=[node(1, 0, ready_at=100)],
        attempts=[
            told(attempt(1, 1, 100, 500, AttemptOutcome.FAILED), 150, 40, 480),
            attempt(2, 1, 600),
        ],
        creates=[create(0, "ok", 1)],
    )
    assert table(slot_ledger(history, at(700)))[1:] == [
        (100, 150, C.PROGRAM_STARTUP, None),
        (150, 500, C.WASTED, None),
        (500, 600, C.CRASH_RESTART, P.SETUP),
        (600, 700, C.PRODUCTIVE, None),
    ]
    wasted = [i for i in slot_ledger(history, at(700)) if i.category is C.WASTED]
    assert [(i.cause, i.steps) for i in wasted] == [(LossCause.CRASH, None)]


def test_a_run_that_succeeds_wastes_nothing_and_a_loss_not_yet_seen_does() -> None:
    done = SlotHistory(
        "f", 0, nodes=[node(1, 0, ready_at=100)],
        attempts=[told(attempt(1, 1, 100, 900, AttemptOutcome.SUCCEEDED), 160, 50, 880, 40, 800)],
        creates=[create(0, "ok", 1)], done=True,
    )  # fmt: skip
    assert table(slot_ledger(done, at(1000)))[1:] == [
        (100, 160, C.PROGRAM_STARTUP, None),
        (160, 900, C.PRODUCTIVE, None),
        (900, 1000, C.IDLE, None),
    ]
    # The node died; the attempt is not ended yet in the records (detection).
    lost = SlotHistory(
        "f", 0, nodes=[node(1, 0, ready_at=100, dead_at=700, loss_cause=LossCause.MAINTENANCE)],
        attempts=[told(attempt(1, 1, 100), 160, 50, 690, 45, 650)],
        creates=[create(0, "ok", 1)],
    )  # fmt: skip
    ledger = slot_ledger(lost, at(800))
    assert table(ledger)[1:4] == [
        (100, 160, C.PROGRAM_STARTUP, None),
        (160, 650, C.PRODUCTIVE, None),
        (650, 700, C.WASTED, None),
    ]
    assert [(i.cause, i.steps) for i in ledger if i.category is C.WASTED] == [
        (LossCause.MAINTENANCE, 5)
    ]


_OFFSETS = st.floats(min_value=-200, max_value=2000, allow_nan=False)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.data())
def test_with_progress_the_intervals_still_tile_exactly(
    case: tuple[SlotHistory, datetime], data: st.DataObject
) -> None:
    history, now = case
    attempts = []
    for a in history.attempts:
        if data.draw(st.booleans()):
            base = (a.started_at - T0).total_seconds()
            first, step_at, ckpt_at = (base + data.draw(_OFFSETS) for _ in range(3))
            a = told(a, first, data.draw(st.integers(0, 99)), step_at,
                     data.draw(st.none() | st.integers(0, 99)), ckpt_at)  # fmt: skip
        attempts.append(a)
    history = replace(history, attempts=attempts)
    ledger = slot_ledger(history, now)
    first_create = history.first
    assert first_create is not None
    if first_create >= now:
        assert ledger == []
        return
    assert (ledger[0].start, ledger[-1].end) == (first_create, now)
    for x, y in pairwise(ledger):
        assert x.end == y.start
    assert all(i.start < i.end for i in ledger)
    assert sum((i.end - i.start for i in ledger), timedelta()) == now - first_create
    assert all(i.steps is None or i.steps >= 0 for i in ledger)
