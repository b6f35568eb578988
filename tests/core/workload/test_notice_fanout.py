"""A notice heard on one slice of a running job: which runs get the stop signal, and how long
the daemon waits for the workload to stop (core/workload/notices.py `on_notice`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.workload.notices import STOP_SLACK, on_notice

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
SPEC = WorkloadSpec(run="python3 train.py", stop_signal="INT", stop_grace=25.0)


@pytest.mark.parametrize(
    ("heard", "slices", "others"),
    [
        (0, 1, ()),  # one slice: its own watcher signalled it; no other to tell
        (0, 2, (1,)),
        (1, 2, (0,)),
        (1, 4, (0, 2, 3)),  # every other slice, in order, never the one that heard it
        (3, 4, (0, 1, 2)),
    ],
)
def test_the_other_slices_get_the_same_signal(
    heard: int, slices: int, others: tuple[int, ...]
) -> None:
    todo = on_notice(heard, slices, SPEC, T0)
    assert (todo.heard, todo.others, todo.signal) == (heard, others, "INT")


@pytest.mark.parametrize(
    ("grace", "heard_after", "wait"),
    [
        (25.0, 0.0, 25.5),  # heard at once: the whole grace, and the slack
        (25.0, 10.0, 15.5),  # heard 10 s after the notice (the wait was asked again)
        (25.0, 25.0, 0.5),  # the grace is over: only the slack
        (25.0, 40.0, 0.5),  # heard late: never a negative wait
        (0.0, 0.0, 0.5),  # no grace at all
        (120.0, 0.25, 120.25),
    ],
)
def test_the_wait_for_the_stop_ends_at_the_grace(grace: float, heard_after: float,
                                                 wait: float) -> None:  # fmt: skip
    spec = WorkloadSpec(run="x", stop_grace=grace)
    todo = on_notice(0, 2, spec, T0)
    assert todo.notice_at == T0
    assert todo.stop_by == T0 + timedelta(seconds=grace)
    assert todo.wait_for_stop(T0 + timedelta(seconds=heard_after)) == pytest.approx(wait)
    assert timedelta(seconds=0.5) == STOP_SLACK


@pytest.mark.parametrize(("heard", "slices"), [(-1, 2), (2, 2), (0, 0)])
def test_a_slice_outside_the_job_is_a_bug(heard: int, slices: int) -> None:
    with pytest.raises(ValueError, match="slice"):
        on_notice(heard, slices, SPEC, T0)
