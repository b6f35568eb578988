"""The node-incarnation lifecycle table (core/model/lifecycle.py): complete, commented, sound."""

from __future__ import annotations

import inspect
import itertools
import re

import pytest

from tpucared.core.model import lifecycle
from tpucared.core.model.lifecycle import (
    LIVE_PHASES,
    TRANSITIONS,
    IllegalTransition,
    can_transition,
    check_transition,
    is_terminal,
)
from tpucared.core.model.records import NodePhase

P = NodePhase
ALL_PAIRS = list(itertools.product(P, P))


def test_every_phase_has_a_row() -> None:
    assert set(TRANSITIONS) == set(P)
    for targets in TRANSITIONS.values():
        assert targets <= set(P)


def test_terminal_phases() -> None:
    assert {p for p in P if is_terminal(p)} == {P.DELETED, P.FAILED}
    assert frozenset(p for p in P if not is_terminal(p)) == LIVE_PHASES


def test_no_self_loops() -> None:
    assert all(p not in TRANSITIONS[p] for p in P)


def _reachable(start: NodePhase) -> set[NodePhase]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_every_phase_is_reachable_from_requested() -> None:
    assert _reachable(P.REQUESTED) == set(P)


@pytest.mark.parametrize("phase", sorted(LIVE_PHASES))
def test_every_live_phase_can_end(phase: NodePhase) -> None:
    # No trap: whatever happens, an incarnation can always be finished off.
    assert _reachable(phase) & {P.DELETED, P.FAILED}


@pytest.mark.parametrize("phase", sorted(LIVE_PHASES - {P.DELETING}))
def test_every_live_phase_can_be_deleted(phase: NodePhase) -> None:
    # `tpucared down`, scale-down and death must be able to reach a delete from anywhere.
    assert P.DELETING in TRANSITIONS[phase] or P.DELETING in TRANSITIONS[P.DEAD]
    assert P.DEAD in TRANSITIONS[phase] or P.DELETING in TRANSITIONS[phase]


@pytest.mark.parametrize(("current", "new"), ALL_PAIRS, ids=lambda p: p.value)
def test_check_transition_matches_the_table(current: NodePhase, new: NodePhase) -> None:
    legal = new in TRANSITIONS[current]
    assert can_transition(current, new) is legal
    if legal:
        check_transition(current, new)
    else:
        with pytest.raises(IllegalTransition, match=f"{current.value} -> {new.value}"):
            check_transition(current, new)


@pytest.mark.parametrize(
    "walk",
    [
        # The life of a spot slice: created, used, preempted, deleted, gone.
        [P.REQUESTED, P.CREATING, P.READY, P.DEAD, P.DELETING, P.DELETED],
        # No capacity: the create operation fails; the slot tries again with a new incarnation.
        [P.REQUESTED, P.CREATING, P.FAILED],
        # Adopted after a restart: the node is already READY in the cloud.
        [P.REQUESTED, P.READY, P.DELETING, P.DELETED],
        # Vanished without a trace: nothing left to delete.
        [P.REQUESTED, P.CREATING, P.READY, P.DEAD, P.DELETED],
        # Scaled down while the create was still unconfirmed.
        [P.REQUESTED, P.DELETING, P.DELETED],
    ],
    ids=["spot-life", "stockout", "adopted", "vanished", "scale-down-early"],
)
def test_walks(walk: list[NodePhase]) -> None:
    for current, new in itertools.pairwise(walk):
        check_transition(current, new)
    assert is_terminal(walk[-1])


def test_every_edge_is_commented() -> None:
    # STYLE.md: a comment on every edge. Each `P.X,` line inside TRANSITIONS carries one.
    source = inspect.getsource(lifecycle)
    table = source[source.index("TRANSITIONS:") : source.index("LIVE_PHASES")]
    edge_lines = [line for line in table.splitlines() if re.match(r"\s+P\.\w+,", line)]
    assert len(edge_lines) == sum(len(t) for t in TRANSITIONS.values())
    assert all("#" in line for line in edge_lines)
