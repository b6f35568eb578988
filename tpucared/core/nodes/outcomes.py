"""Which node phase the outcome of a create or delete belongs to.

Owns the rules that say, for an outcome arriving from the cloud, whether it is still recorded
on its incarnation. A create or delete reaches the cloud in two steps, each ending while the
planner keeps going: the call (runtime/nodes/calls.py), which the API accepts with a
long-running operation or refuses with an error, then that operation
(runtime/nodes/operations.py), which ends in success or an error. The planner recorded the
intent first (REQUESTED for a create, DELETING for a delete: core/vocab/actions.py) and may
have moved the incarnation on by the time an outcome arrives (the node was listed, found dead,
deleted). The runtime reads the incarnation, asks here with its current phase, and writes what
fits in the same transaction; the planner decides on what was recorded at its next tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from tpucared.core.model.lifecycle import PENDING_PHASES
from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import ErrorKind

Verb = Literal["create", "delete"]

# The phase the intent of each call recorded, which its outcome belongs to.
_CALL_PHASE: Mapping[Verb, NodePhase] = {
    "create": NodePhase.REQUESTED,
    "delete": NodePhase.DELETING,
}
# The phases in which an operation's error still says something about the incarnation.
_OPERATION_PHASES: Mapping[Verb, frozenset[NodePhase]] = {
    "create": PENDING_PHASES,
    "delete": frozenset({NodePhase.DELETING}),
}


def call_phase(verb: Verb) -> NodePhase:
    """The phase a call's outcome is recorded in: the one its intent recorded. A create refused
    after the node was listed (CREATING) is not recorded: a lost response does not make the
    create a failure. The store's compare-and-set on this phase refuses a stale write."""
    return _CALL_PHASE[verb]


def accepted_create_phase(phase: NodePhase) -> NodePhase | None:
    """Where an accepted create call leaves an incarnation found in `phase`, with the operation
    recorded: REQUESTED moves to CREATING; CREATING (the planner saw the node listed before the
    call returned) stays; None for any other phase, which moved on: nothing is recorded."""
    if phase in (NodePhase.REQUESTED, NodePhase.CREATING):
        return NodePhase.CREATING
    return None


def operation_error_fits(verb: Verb, phase: NodePhase) -> bool:
    """Whether the error an operation ended with is recorded on an incarnation in `phase`: a
    create's while it is pending (REQUESTED / CREATING), a delete's while DELETING. A create
    failure that arrives after the node was found dead must not read as a failed delete. (The
    finished operation is cleared from the incarnation whatever its phase.)"""
    return phase in _OPERATION_PHASES[verb]


def sets_last_error(verb: Verb) -> bool:
    """Whether a recorded error of `verb` is also the slot's `last_error` (what `status` shows
    of a slot that cannot get a node): a create's is, a delete's concerns the node only."""
    return verb == "create"


def operation_verb(phase: NodePhase) -> Verb:
    """What an operation recorded on an incarnation in `phase` does, when its name is all we
    know (recorded by a previous run): a delete while DELETING, a create otherwise."""
    return "delete" if phase is NodePhase.DELETING else "create"


def ended_verb(watched: Verb, reported: str | None) -> Verb:
    """The verb of a finished operation: the one the API reports in its metadata when it is a
    create or a delete, else the one we watched it for."""
    if reported == "create":
        return "create"
    if reported == "delete":
        return "delete"
    return watched


def interrupted_call(phase: NodePhase, error: ErrorKind | None) -> Verb | None:
    """At start-up, the call a previous process left without an outcome on an incarnation in
    `phase` with `error` recorded: a create still REQUESTED or a delete still DELETING, with no
    error recorded. None: no call of that incarnation was cut off."""
    if error is not None:
        return None
    for verb, intent in _CALL_PHASE.items():
        if phase is intent:
            return verb
    return None
