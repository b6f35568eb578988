"""The workload-attempt lifecycle table (core/workload/attempts.py): complete, commented, sound."""

from __future__ import annotations

import inspect
import itertools
import re
from datetime import UTC, datetime, timedelta

import pytest

from tpucared.core.model.records import AttemptOutcome, WorkloadAttemptRecord
from tpucared.core.workload import attempts
from tpucared.core.workload.attempts import (
    INITIAL,
    OPEN_STATES,
    TRANSITIONS,
    AttemptState,
    IllegalAttemptTransition,
    attempt_state,
    can_attempt_transition,
    check_attempt_transition,
    ended,
    is_attempt_terminal,
    outcome_of,
    state_of,
)

S = AttemptState
T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALL_PAIRS = list(itertools.product(S, S))


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(S)
    for targets in TRANSITIONS.values():
        assert targets <= set(S)


def test_terminal_states_are_the_outcomes() -> None:
    terminal = {s for s in S if is_attempt_terminal(s)}
    assert terminal == {ended(o) for o in AttemptOutcome}
    assert all(TRANSITIONS[s] == frozenset() for s in terminal)
    assert frozenset(set(S) - terminal) == OPEN_STATES == {S.RUNNING}
    assert INITIAL is S.RUNNING


def test_no_self_loops() -> None:
    assert all(s not in TRANSITIONS[s] for s in S)


def test_a_running_attempt_can_end_with_every_outcome() -> None:
    # Whatever the judge decides, the store can record it.
    assert TRANSITIONS[INITIAL] == {ended(o) for o in AttemptOutcome}


@pytest.mark.parametrize("outcome", list(AttemptOutcome), ids=lambda o: o.value)
def test_states_and_outcomes_map_both_ways(outcome: AttemptOutcome) -> None:
    state = ended(outcome)
    assert state.value == outcome.value
    assert outcome_of(state) is outcome
    assert outcome_of(S.RUNNING) is None


@pytest.mark.parametrize(("current", "new"), ALL_PAIRS, ids=lambda s: s.value)
def test_check_attempt_transition_matches_the_table(
    current: AttemptState, new: AttemptState
) -> None:
    legal = new in TRANSITIONS[current]
    assert can_attempt_transition(current, new) is legal
    if legal:
        check_attempt_transition(current, new)
    else:
        with pytest.raises(IllegalAttemptTransition, match=f"{current.value} -> {new.value}"):
            check_attempt_transition(current, new)


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (S.SUCCEEDED, S.FAILED),  # an outcome is never rewritten
        (S.FAILED, S.RUNNING),  # a finished attempt is never resumed: a new one starts
        (S.PREEMPTED, S.CANCELLED),
        (S.CANCELLED, S.CANCELLED),  # not even to the same outcome
        (S.RUNNING, S.RUNNING),  # resuming writes nothing
    ],
    ids=["rewrite", "reopen", "re-end", "repeat", "resume"],
)
def test_illegal_edges_raise(current: AttemptState, new: AttemptState) -> None:
    with pytest.raises(IllegalAttemptTransition) as err:
        check_attempt_transition(current, new)
    assert (err.value.current, err.value.new) == (current, new)
    assert isinstance(err.value, ValueError)


def _attempt(ended_at: datetime | None, outcome: AttemptOutcome | None) -> WorkloadAttemptRecord:
    return WorkloadAttemptRecord(
        id=1, fleet="f", slot=0, incarnation_id=1, number=1, started_at=T0,
        ended_at=ended_at, outcome=outcome,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("ended_at", "outcome", "state"),
    [
        (None, None, S.RUNNING),
        (T0 + timedelta(hours=1), AttemptOutcome.SUCCEEDED, S.SUCCEEDED),
        (T0 + timedelta(hours=1), AttemptOutcome.FAILED, S.FAILED),
        (T0 + timedelta(hours=1), AttemptOutcome.PREEMPTED, S.PREEMPTED),
        (T0 + timedelta(hours=1), AttemptOutcome.HUNG, S.HUNG),
        (T0 + timedelta(hours=1), AttemptOutcome.CANCELLED, S.CANCELLED),
    ],
)
def test_the_state_is_derived_from_the_stored_record(
    ended_at: datetime | None, outcome: AttemptOutcome | None, state: AttemptState
) -> None:
    assert attempt_state(_attempt(ended_at, outcome)) is state
    assert state_of(ended_at, outcome) is state


@pytest.mark.parametrize(
    ("ended_at", "outcome"),
    [(T0, None), (None, AttemptOutcome.FAILED)],
    ids=["ended-without-outcome", "outcome-without-end"],
)
def test_a_half_written_record_is_no_state(
    ended_at: datetime | None, outcome: AttemptOutcome | None
) -> None:
    with pytest.raises(ValueError, match="attempt stored with"):
        state_of(ended_at, outcome)


def test_every_edge_is_commented() -> None:
    # As for the node lifecycle: a comment on every edge. Each `S.X,` line inside TRANSITIONS
    # carries one, and so does every terminal state's empty row.
    source = inspect.getsource(attempts)
    table = source[source.index("TRANSITIONS:") : source.index("INITIAL:")]
    lines = table.splitlines()
    edge_lines = [line for line in lines if re.match(r"\s+S\.\w+,", line)]
    assert len(edge_lines) == sum(len(t) for t in TRANSITIONS.values())
    assert all("#" in line for line in edge_lines)
    terminal_rows = [line for line in lines if re.match(r"\s+S\.\w+: frozenset\(\),", line)]
    assert len(terminal_rows) == sum(1 for s in S if is_attempt_terminal(s))
    assert all("# terminal" in line for line in terminal_rows)
