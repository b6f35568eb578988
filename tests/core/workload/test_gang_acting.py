"""Which slices a workload action acts on and a launch's all or none (core/workload/gang.py
`acting_on`, `all_or_none`), and what a slot's probe is at (`probe_target`): the rules
runtime/workload/executor.py `_slices` and runner.py `_job` apply to the slot's live
incarnations, the workers recorded on them and the slices the launcher could locate."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tpucared.core.model.records import IncarnationRecord, NodePhase, WorkloadAttemptRecord
from tpucared.core.workload.gang import acting_on, all_or_none, probe_target

from .workload_support import slice_node

P = NodePhase
T0 = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
inc = slice_node


@pytest.mark.parametrize(
    ("live", "stand_in", "expected", "launch", "ids"),
    [
        ([inc(7, 0)], 7, 1, True, [7]),  # one slice: the node itself
        ([inc(7, 0, P.CREATING)], 7, 1, True, []),
        ([inc(7, 0, P.CREATING)], 7, 1, False, []),  # a stop: nothing READY to stop
        ([], 7, 1, False, []),
        ([inc(5, 1), inc(4, 0)], 5, 2, True, [4, 5]),  # by slice, whatever the order given
        ([inc(5, 1), inc(4, 0)], 4, 2, True, []),  # planned on an older set of slices
        ([inc(6, 1), inc(4, 0)], 5, 2, True, []),  # a slice replaced since the plan
        ([inc(4, 0), inc(5, 1, P.CREATING)], 5, 2, True, []),  # not whole yet
        ([inc(4, 0), inc(5, 1, P.DEAD)], 5, 2, False, [4]),  # a stop reaches what runs
        ([inc(4, 0), inc(5, 1, P.DEAD)], 5, 2, True, []),
        ([inc(4, 0)], 4, 2, True, []),  # a slice missing
        ([inc(4, 0)], 4, 2, False, [4]),
        ([inc(4, 0), inc(5, 1), inc(6, 2)], 6, 2, True, []),  # more than the fleet asks for
    ],
)
def test_acting_on(
    live: list[IncarnationRecord], stand_in: int, expected: int, launch: bool, ids: list[int]
) -> None:
    assert [i.id for i in acting_on(live, stand_in, expected, launch=launch)] == ids


@pytest.mark.parametrize(
    ("reached", "launch", "got"),
    [
        ({4: "a", 5: "b"}, True, ["a", "b"]),
        ({5: "b", 4: "a"}, True, ["a", "b"]),  # in the slices' order, not the map's
        ({4: "a"}, True, []),  # a launch on some slices only: none
        ({4: "a"}, False, ["a"]),  # a stop: every slice reached
        ({}, False, []),
        ({4: "a", 5: "b", 9: "z"}, False, ["a", "b"]),  # only the slices asked about
    ],
)
def test_all_or_none(reached: dict[int, str], launch: bool, got: list[str]) -> None:
    assert all_or_none([inc(4, 0), inc(5, 1)], reached, launch=launch) == got


def attempt(number: int, on: int) -> WorkloadAttemptRecord:
    return WorkloadAttemptRecord(
        id=number, fleet="ms", slot=0, number=number, incarnation_id=on, started_at=T0
    )


@pytest.mark.parametrize(
    ("live", "expected", "with_workers", "last", "got"),
    [
        ([inc(7, 0)], 1, {7}, None, (7, "ms-0-0", None)),  # the one node, named as it is
        ([inc(7, 0)], 1, {7}, attempt(3, 7), (7, "ms-0-0", 3)),
        ([inc(7, 0)], 1, {7}, attempt(3, 6), (7, "ms-0-0", None)),  # made on an older node
        ([inc(7, 0)], 1, set(), None, None),  # no workers recorded yet
        ([inc(7, 0, P.CREATING)], 1, {7}, None, None),
        ([inc(4, 0), inc(5, 1)], 2, {4, 5}, attempt(2, 5), (5, "ms-0", 2)),  # the stand-in
        ([inc(4, 0), inc(5, 1)], 2, {4, 5}, attempt(2, 4), (5, "ms-0", None)),
        ([inc(4, 0), inc(5, 1)], 2, {4}, None, None),  # a slice without workers
        ([inc(4, 0)], 2, {4}, None, None),  # a slice missing
    ],
)
def test_probe_target(
    live: list[IncarnationRecord],
    expected: int,
    with_workers: set[int],
    last: WorkloadAttemptRecord | None,
    got: tuple[int, str, int | None] | None,
) -> None:
    target = probe_target("ms-0", live, expected, with_workers, last)
    if got is None:
        assert target is None
        return
    assert target is not None
    assert (target.node.id, target.node.node_name, target.attempt) == got
    assert target.node.phase is P.READY
    assert [i.id for i in target.slices] == sorted(i.id for i in live)
