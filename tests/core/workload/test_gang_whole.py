"""When a slot's live incarnations make the whole slot the workload runs on, and which one the
stand-in names (core/workload/gang.py `whole`, `newest`): the rule the runtime's probe jobs
(runner.py) and launches (executor.py) apply, the same as `Gang.complete`."""

from __future__ import annotations

import pytest

from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.workload.gang import Gang, newest, whole

from .workload_support import slice_node

P = NodePhase
inc = slice_node


@pytest.mark.parametrize(
    ("members", "expected", "slices"),
    [
        ([inc(7, 0)], 1, (0,)),  # one slice: the node itself
        ([inc(7, 0, P.CREATING)], 1, None),
        ([], 1, None),
        ([inc(5, 1), inc(4, 0)], 2, (0, 1)),  # by slice, whatever the order given
        ([inc(4, 0), inc(5, 1, P.CREATING)], 2, None),  # a slice not READY yet
        ([inc(4, 0), inc(5, 1, P.DEAD)], 2, None),  # a slice dead: not whole any more
        ([inc(4, 0), inc(5, 1, P.DELETING)], 2, None),
        ([inc(4, 0)], 2, None),  # a slice missing
        ([inc(4, 0), inc(5, 1), inc(6, 2)], 2, None),  # more than the fleet asks for
        ([inc(4, 0), inc(5, 0)], 2, None),  # two of one slice, none of the other
        ([inc(4, 0), inc(5, 1), inc(6, 2)], 3, (0, 1, 2)),
    ],
)
def test_whole(members: list[IncarnationRecord], expected: int,
               slices: tuple[int, ...] | None) -> None:  # fmt: skip
    found = whole(members, expected)
    assert (None if found is None else tuple(i.slice for i in found)) == slices
    # The planner's gang says the same of the same slices (nothing changes them this tick).
    gang = Gang("ms-0", expected, tuple(members), {i.id: i.phase for i in members}, {})
    assert gang.complete is (slices is not None)


@pytest.mark.parametrize(
    ("members", "stands_for"),
    [
        ([inc(7, 0)], 7),
        ([inc(4, 0), inc(5, 1)], 5),
        ([inc(9, 0), inc(5, 1)], 9),  # slice 0 replaced: the stand-in's id changes with it
        ([inc(4, 0), inc(12, 1), inc(6, 2)], 12),
    ],
)
def test_newest_is_the_stand_ins_id(members: list[IncarnationRecord], stands_for: int) -> None:
    assert newest(members).id == stands_for
    if len(members) > 1:
        gang = Gang("ms-0", len(members), tuple(members), {i.id: i.phase for i in members}, {})
        stand_in = gang.stand_in()
        assert stand_in is not None
        assert stand_in.id == stands_for
