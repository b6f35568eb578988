"""Which phase a create/delete outcome belongs to: every phase x verb, spelled out."""

from __future__ import annotations

import pytest

from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import ErrorKind
from tpucared.core.nodes.outcomes import (
    Verb,
    accepted_create_phase,
    call_phase,
    ended_verb,
    interrupted_call,
    operation_error_fits,
    operation_verb,
    sets_last_error,
)

P = NodePhase
VERBS: tuple[Verb, ...] = ("create", "delete")
EVERY = [(phase, verb) for phase in NodePhase for verb in VERBS]

# The tables these rules must agree with, written out rather than derived from the code.
OPERATION_ERROR_PHASES = {
    "create": {P.REQUESTED, P.CREATING},
    "delete": {P.DELETING},
}
CALL_PHASE = {"create": P.REQUESTED, "delete": P.DELETING}
ACCEPTED_CREATE = [
    (P.REQUESTED, P.CREATING),  # the call's answer moves the intent on
    (P.CREATING, P.CREATING),  # listed before the call returned: just the operation
    (P.READY, None),
    (P.DEAD, None),
    (P.DELETING, None),
    (P.DELETED, None),
    (P.FAILED, None),
]


def test_the_tables_cover_every_phase() -> None:
    # A new phase must be placed in ACCEPTED_CREATE (and in the rules) on purpose.
    assert [phase for phase, _ in ACCEPTED_CREATE] == list(NodePhase)


@pytest.mark.parametrize(("phase", "verb"), EVERY)
def test_an_operation_error_is_recorded_only_in_its_own_phases(
    phase: NodePhase, verb: Verb
) -> None:
    assert operation_error_fits(verb, phase) is (phase in OPERATION_ERROR_PHASES[verb])


def test_a_late_create_failure_never_reads_as_a_failed_delete() -> None:
    assert not operation_error_fits("create", P.DELETING)
    assert not operation_error_fits("create", P.DEAD)
    assert operation_error_fits("delete", P.DELETING)


@pytest.mark.parametrize(("phase", "verb"), EVERY)
def test_a_call_outcome_belongs_to_the_phase_of_its_intent(phase: NodePhase, verb: Verb) -> None:
    recorded = call_phase(verb) is phase
    assert recorded is (CALL_PHASE[verb] is phase)


def test_a_create_refused_once_the_node_is_listed_is_not_a_failure() -> None:
    assert call_phase("create") is not P.CREATING


@pytest.mark.parametrize(("phase", "after"), ACCEPTED_CREATE)
def test_an_accepted_create_moves_a_pending_incarnation_only(
    phase: NodePhase, after: NodePhase | None
) -> None:
    assert accepted_create_phase(phase) is after


@pytest.mark.parametrize(("verb", "slot_error"), [("create", True), ("delete", False)])
def test_only_a_create_error_is_the_slots_last_error(verb: Verb, slot_error: bool) -> None:
    assert sets_last_error(verb) is slot_error


@pytest.mark.parametrize("phase", list(NodePhase))
def test_an_operation_known_by_name_only_is_a_delete_while_deleting(phase: NodePhase) -> None:
    assert operation_verb(phase) == ("delete" if phase is P.DELETING else "create")


@pytest.mark.parametrize(
    ("watched", "reported", "verb"),
    [
        ("create", None, "create"),
        ("delete", None, "delete"),
        ("create", "delete", "delete"),  # the API knows best what its operation did
        ("delete", "create", "create"),
        ("create", "create", "create"),
        ("delete", "delete", "delete"),
        ("delete", "update", "delete"),  # any other verb: the one we watched it for
        ("create", "", "create"),
    ],
)
def test_the_verb_of_a_finished_operation(watched: Verb, reported: str | None, verb: Verb) -> None:
    assert ended_verb(watched, reported) == verb


@pytest.mark.parametrize("phase", list(NodePhase))
@pytest.mark.parametrize("error", [None, ErrorKind.TRANSIENT, ErrorKind.CAPACITY])
def test_an_interrupted_call_is_an_intent_without_an_outcome(
    phase: NodePhase, error: ErrorKind | None
) -> None:
    expected = {P.REQUESTED: "create", P.DELETING: "delete"}.get(phase) if error is None else None
    assert interrupted_call(phase, error) == expected
