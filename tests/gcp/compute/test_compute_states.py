"""The one table of instance statuses: every status has a class, and the readings issue 27
asks for (RUNNING usable, TERMINATED dead, PENDING waiting, unknown unreadable)."""

from __future__ import annotations

import pytest

from tpucared.core.model.observed import StateClass
from tpucared.core.vocab.stuck import RULES_BY_NAME
from tpucared.gcp.compute.states import (
    INSTANCE_STATES,
    InstanceStatus,
    parse_status,
    state_fields,
)

S = InstanceStatus
K = StateClass


def test_every_status_is_in_the_table_and_every_rule_exists() -> None:
    assert set(INSTANCE_STATES) == set(InstanceStatus)
    for cls, rule in INSTANCE_STATES.values():
        assert rule is None or rule in RULES_BY_NAME
        # A state the planner waits on is timed; one it acts on at once is not.
        assert (rule is not None) == (cls in (K.CREATING, K.TRANSIENT, K.WAITING))


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        ("RUNNING", K.USABLE),
        ("PROVISIONING", K.CREATING),
        ("STAGING", K.CREATING),
        ("STOPPING", K.DEAD),
        ("PENDING_STOP", K.DEAD),
        ("STOPPED", K.DEAD),
        ("SUSPENDING", K.DEAD),
        ("SUSPENDED", K.DEAD),
        ("TERMINATED", K.DEAD),  # a spot VM preempted with STOP ends here
        ("REPAIRING", K.TRANSIENT),
        ("PENDING", K.WAITING),  # flex-start waiting for capacity
        ("DEPROVISIONING", K.DELETING),
    ],
)
def test_the_api_statuses_read_as_issue_27_says(status: str, cls: StateClass) -> None:
    parsed = parse_status(status)
    assert parsed == status
    assert state_fields(parsed)["state_class"] is cls


@pytest.mark.parametrize("value", ["HIBERNATING", 3, True, {"status": "RUNNING"}, ["RUNNING"]])
def test_a_status_we_cannot_read_is_unreadable(value: object) -> None:
    assert parse_status(value) is S.UNRECOGNIZED
    assert state_fields(parse_status(value))["state_class"] is K.UNREADABLE


@pytest.mark.parametrize("value", ["UNRECOGNIZED", "STATUS_UNSPECIFIED"])
def test_our_own_names_sent_by_the_api_are_not_trusted(value: str) -> None:
    assert parse_status(value) is S.UNRECOGNIZED


@pytest.mark.parametrize("value", [None, ""])
def test_no_status_is_a_timed_blip(value: object) -> None:
    fields = state_fields(parse_status(value))
    assert fields["state"] is S.STATUS_UNSPECIFIED
    assert fields["state_class"] is K.TRANSIENT
    assert fields["stuck_rule"] == "unspecified"
