"""The leader lease's rules (core/leadership/lease.py), table by table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tpucared.core.leadership.lease import (
    ROLE_TRANSITIONS,
    Holder,
    IllegalRoleChange,
    Lease,
    Role,
    Step,
    attempt_interval,
    check_role_change,
    default_lease,
    expired,
    lease_problem,
    local_deadline,
    may_act,
    next_step,
    stale,
)

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
ME = Holder("vm-a", 100, "a" * 36)
OTHER = Holder("vm-b", 200, "b" * 36)


def lease(holder: Holder | None, epoch: int, expires_in: float | None) -> Lease:
    expires = None if expires_in is None else T0 + timedelta(seconds=expires_in)
    at = None if holder is None else T0 - timedelta(seconds=5)
    return Lease(epoch, holder, at, at, expires)


@pytest.mark.parametrize(
    ("row", "my_epoch", "step"),
    [
        # never taken: the first attempt takes it
        (lease(None, 0, None), None, Step.TAKE),
        # mine, my term, unexpired: renew
        (lease(ME, 3, 10), 3, Step.RENEW),
        # mine but expired in the database: a new term
        (lease(ME, 3, -1), 3, Step.TAKE),
        # mine, but I stood down (no epoch) or believe another term: a new term
        (lease(ME, 3, 10), None, Step.TAKE),
        (lease(ME, 4, 10), 3, Step.TAKE),
        # another's, unexpired: wait, whatever I believe
        (lease(OTHER, 3, 10), None, Step.WAIT),
        (lease(OTHER, 4, 10), 3, Step.WAIT),
        # another's, expired (or exactly at expiry): take
        (lease(OTHER, 3, -0.001), None, Step.TAKE),
        (lease(OTHER, 3, 0), None, Step.TAKE),
        # released: expires_at is the release
        (lease(OTHER, 3, 0), 2, Step.TAKE),
    ],
)
def test_next_step(row: Lease, my_epoch: int | None, step: Step) -> None:
    assert next_step(row, ME, my_epoch, T0) is step


@pytest.mark.parametrize(
    ("row", "is_expired"),
    [
        (lease(None, 0, None), True),
        (lease(OTHER, 1, None), True),
        (lease(OTHER, 1, 0), True),
        (lease(OTHER, 1, 0.001), False),
    ],
)
def test_expired(row: Lease, is_expired: bool) -> None:
    assert expired(row, T0) is is_expired


@pytest.mark.parametrize(
    ("role", "deadline", "now", "ok"),
    [
        (Role.LEADER, 10.0, 9.99, True),
        (Role.LEADER, 10.0, 10.0, False),  # at the deadline: ask the database first
        (Role.LEADER, None, 0.0, False),
        (Role.STANDBY, 10.0, 0.0, False),  # a standby never acts
        (Role.STOPPED, 10.0, 0.0, False),
    ],
)
def test_may_act(role: Role, deadline: float | None, now: float, ok: bool) -> None:
    assert may_act(role, deadline, now) is ok


def test_the_local_deadline_comes_before_the_database_expiry() -> None:
    # The attempt's start: the database's `now` is later, so its expiry is later still.
    assert local_deadline(100.0, 12.0) == 109.0
    assert local_deadline(100.0, 12.0) < 100.0 + 12.0
    # Renewed twice per local term: two attempts may fail before the term ends.
    assert attempt_interval(12.0) * 2 < 12.0 * 0.75


@pytest.mark.parametrize(
    ("before", "after", "allowed"),
    [
        (Role.STANDBY, Role.LEADER, True),
        (Role.STANDBY, Role.STANDBY, True),
        (Role.LEADER, Role.LEADER, True),
        (Role.LEADER, Role.STANDBY, True),
        (Role.LEADER, Role.STOPPED, True),
        (Role.STANDBY, Role.STOPPED, True),
        (Role.STOPPED, Role.LEADER, False),
        (Role.STOPPED, Role.STANDBY, False),
        (Role.STOPPED, Role.STOPPED, False),
    ],
)
def test_role_transitions(before: Role, after: Role, allowed: bool) -> None:
    assert (after in ROLE_TRANSITIONS[before]) is allowed
    if allowed:
        assert check_role_change(before, after) is after
    else:
        with pytest.raises(IllegalRoleChange):
            check_role_change(before, after)


def test_every_role_has_a_row() -> None:
    assert set(ROLE_TRANSITIONS) == set(Role)


@pytest.mark.parametrize(
    ("lease_s", "poll_s", "problem"),
    [
        (15.0, 10.0, None),
        (10.0, 10.0, "must be longer than daemon.poll_interval (10s)"),
        (2.0, 0.5, None),
        (1.0, 2.0, "must be longer than daemon.poll_interval (2s)"),
    ],
)
def test_lease_problem(lease_s: float, poll_s: float, problem: str | None) -> None:
    assert lease_problem(lease_s, poll_s) == problem


@pytest.mark.parametrize(
    ("row", "lease_s", "warning"),
    [
        (lease(None, 0, None), None, "no daemon has ever led on this database"),
        (lease(OTHER, 2, 10), None, None),
        (lease(OTHER, 2, 10), 15.0, None),
        (
            lease(OTHER, 2, 10),
            4.0,
            "the leader's last renewal is 5s old, older than the lease (4s)",
        ),
        (
            lease(OTHER, 2, -1),
            None,
            "no daemon leads: the lease was last renewed 5s ago and has expired",
        ),
    ],
)
def test_stale(row: Lease, lease_s: float | None, warning: str | None) -> None:
    assert stale(row, T0, lease_s) == warning


@pytest.mark.parametrize(
    ("poll", "lease"), [(1.0, 15.0), (10.0, 15.0), (20.0, 30.0), (30.0, 45.0), (600.0, 900.0)]
)
def test_the_default_lease_outlasts_a_poll_and_a_half(poll: float, lease: float) -> None:
    assert default_lease(poll) == lease
    assert lease_problem(default_lease(poll), poll) is None
