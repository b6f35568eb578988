"""The workload-attempt lifecycle as an explicit state machine.

An attempt is one launch of the workload on every worker of a slot's node (its `number` is
TPUCARED_ATTEMPT). Its state is not a column: it is derived from the record as it is stored
(`attempt_state`): RUNNING while `ended_at` is unset, then the `AttemptOutcome` it ended with.

`TRANSITIONS` is the single table of allowed edges between `AttemptState`s. The store writes an
attempt in two places (tpucared/store/write_workloads.py), and checks this table in both:

  start_attempt   records a new attempt in `INITIAL` (RUNNING), before the launch, and only
                  while every earlier attempt of its slot is in a terminal state
                  (`AttemptRunning` otherwise);
  finish_attempt  calls `check_attempt_transition(expected, <its outcome>)` before writing,
                  then a compare-and-set on the attempt still being in `expected`
                  (`StaleWrite` if it moved on, e.g. finishing twice).

What is not a state, because nothing of it is stored: resuming a RUNNING attempt on the
workers that never started it (the runner only re-reads the record), and stopping its
processes (`StopWorkload` follows the `FinishAttempt`: the outcome is recorded before anything
is killed, so a stopped attempt is already terminal). The planner (core/workload/planner.py,
with the verdicts of core/workload/judge.py) only ever proposes the edges in this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Final

from tpucared.core.model.records import AttemptOutcome, WorkloadAttemptRecord


class AttemptState(StrEnum):
    """Where an attempt is in its life: RUNNING, or the outcome it ended with."""

    RUNNING = "running"  # recorded, `ended_at` unset: its runs may be going on the workers
    SUCCEEDED = AttemptOutcome.SUCCEEDED.value
    FAILED = AttemptOutcome.FAILED.value
    PREEMPTED = AttemptOutcome.PREEMPTED.value
    HUNG = AttemptOutcome.HUNG.value
    CANCELLED = AttemptOutcome.CANCELLED.value


S = AttemptState

TRANSITIONS: Mapping[AttemptState, frozenset[AttemptState]] = {
    S.RUNNING: frozenset(
        {
            S.SUCCEEDED,  # every worker exited 0
            S.FAILED,  # a worker exited non-zero or died, never started, or outlived exit_grace
            S.PREEMPTED,  # its node died or left READY, a worker rebooted or stayed unreachable
            S.HUNG,  # no log output on any worker for hang_timeout
            S.CANCELLED,  # stopped by us: slot unwanted (scale-down, down) or workload removed
        }
    ),
    S.SUCCEEDED: frozenset(),  # terminal: the slot is done, or (restart = always) a new attempt
    S.FAILED: frozenset(),  # terminal: charged to failures; a new attempt after the backoff
    S.PREEMPTED: frozenset(),  # terminal: not charged; a new attempt without waiting
    S.HUNG: frozenset(),  # terminal: charged to failures, like FAILED
    S.CANCELLED: frozenset(),  # terminal: not charged; a new attempt, if any, without waiting
}

# The state every attempt is recorded in (start_attempt).
INITIAL: Final = S.RUNNING
# States in which an attempt still holds its slot: no other attempt may start meanwhile.
OPEN_STATES: frozenset[AttemptState] = frozenset(s for s, nxt in TRANSITIONS.items() if nxt)


class IllegalAttemptTransition(ValueError):
    """A write tried an attempt edge that is not in TRANSITIONS. A bug in the caller."""

    def __init__(self, current: AttemptState, new: AttemptState) -> None:
        super().__init__(f"illegal attempt transition {current.value} -> {new.value}")
        self.current = current
        self.new = new


def ended(outcome: AttemptOutcome) -> AttemptState:
    """The terminal state of an attempt that ended with `outcome`."""
    return AttemptState(outcome.value)


def outcome_of(state: AttemptState) -> AttemptOutcome | None:
    """The outcome stored for `state` (None: RUNNING, no outcome yet)."""
    return None if state is S.RUNNING else AttemptOutcome(state.value)


def state_of(ended_at: datetime | None, outcome: AttemptOutcome | None) -> AttemptState:
    """The state of an attempt stored with these columns. An end without an outcome (or an
    outcome without an end) is no state at all: `ValueError`."""
    if ended_at is None and outcome is None:
        return S.RUNNING
    if ended_at is None or outcome is None:
        raise ValueError(f"an attempt stored with ended_at={ended_at} and outcome={outcome}")
    return ended(outcome)


def attempt_state(attempt: WorkloadAttemptRecord) -> AttemptState:
    return state_of(attempt.ended_at, attempt.outcome)


def can_attempt_transition(current: AttemptState, new: AttemptState) -> bool:
    return new in TRANSITIONS[current]


def check_attempt_transition(current: AttemptState, new: AttemptState) -> None:
    if not can_attempt_transition(current, new):
        raise IllegalAttemptTransition(current, new)


def is_attempt_terminal(state: AttemptState) -> bool:
    return not TRANSITIONS[state]
