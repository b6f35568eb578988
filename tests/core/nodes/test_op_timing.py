"""When a create's operation is polled first: the fixed start until two failures are known,
then a hair after their median, within the bounds."""

from __future__ import annotations

import pytest

from tpucared.core.nodes.op_timing import first_create_poll


@pytest.mark.parametrize(
    ("recent", "expected"),
    [
        ((), 0.5),  # nothing learnt: the fixed schedule
        ((2.0,), 0.5),  # one failure is not a pattern
        ((2.0, 2.0), 2.1),  # a hair after the median
        ((1.9, 2.0, 8.0), 2.1),  # the median, not the mean: one slow failure changes little
        ((0.1, 0.2, 0.1), 0.5),  # never before the fixed first poll
        ((30.0, 31.0), 5.0),  # never after the longest wait (the list would see it anyway)
    ],
)
def test_first_create_poll(recent: tuple[float, ...], expected: float) -> None:
    assert first_create_poll(recent, default=0.5, longest=5.0) == pytest.approx(expected)
