"""The leader lease's rules: pure decisions over one lease row, table-tested.

Several `tpucared run` processes may share one PostgreSQL database; the lease row decides which
one leads (the runtime's `LeaseKeeper` applies these rules, the store runs the compare-and-set).
Every instant here is the database's clock (`now` read in the same transaction), never a host's,
except the local deadline, which is this process's monotonic clock: the only clock that still
means something after the process was paused (SIGSTOP, a frozen VM).

- `next_step`: renew (I lead and my term is still in the row, unexpired), take (the row has no
  live holder: released, expired, never held), or wait (someone else holds it).
- A take bumps the epoch; a renew keeps it. Every write and cloud call of the leader is fenced
  by its epoch, so a paused leader that wakes finds another epoch and acts on nothing.
- `local_deadline`: how long this process may act after a successful attempt began, without
  asking the database again: the lease minus a margin. The attempt's start is used (not its
  end), so the local deadline always comes before the database's expiry.
- Roles move along `ROLE_TRANSITIONS`; any other edge is a bug (`IllegalRoleChange`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

# A holder tries every lease / RENEW_DIVISOR: two attempts may fail (a slow database) before
# its term runs out.
RENEW_DIVISOR = 3
# The local deadline ends this share of the lease before the database's expiry: room for the
# database's and this host's clocks to run at slightly different rates, and for a commit
# that was slow to return.
MARGIN_FRACTION = 0.25


class Role(StrEnum):
    STANDBY = "standby"
    LEADER = "leader"
    STOPPED = "stopped"


ROLE_TRANSITIONS: dict[Role, frozenset[Role]] = {
    Role.STANDBY: frozenset(
        {
            Role.STANDBY,  # the lease is someone else's, or the database did not answer
            Role.LEADER,  # took a lease nobody held (released, expired, never taken)
            Role.STOPPED,  # a clean stop while standing by
        }
    ),
    Role.LEADER: frozenset(
        {
            Role.LEADER,  # renewed
            Role.STANDBY,  # lost: taken by another, past the local deadline, a fenced write
            Role.STOPPED,  # a clean stop: the lease is released for a standby to take at once
        }
    ),
    Role.STOPPED: frozenset(),  # terminal: the process is ending
}


class IllegalRoleChange(ValueError):
    """A role change the table does not allow."""


def check_role_change(before: Role, after: Role) -> Role:
    if after not in ROLE_TRANSITIONS[before]:
        raise IllegalRoleChange(f"role {before} -> {after} is not allowed")
    return after


@dataclass(frozen=True)
class Holder:
    """One `tpucared run` process: `instance` is random per process start, so a restarted
    daemon with the same pid (a container) is still a new holder."""

    host: str
    pid: int
    instance: str


@dataclass(frozen=True)
class Lease:
    """The lease row. `holder` None: never taken. A released lease keeps its last holder
    (status shows who led) with `expires_at` at the release."""

    epoch: int
    holder: Holder | None
    acquired_at: datetime | None
    renewed_at: datetime | None
    expires_at: datetime | None


class Step(StrEnum):
    RENEW = "renew"
    TAKE = "take"
    WAIT = "wait"


def expired(lease: Lease, now: datetime) -> bool:
    """No live holder: never taken, released, or not renewed in time."""
    return lease.holder is None or lease.expires_at is None or lease.expires_at <= now


def next_step(lease: Lease, me: Holder, my_epoch: int | None, now: datetime) -> Step:
    """What this process's attempt does. `my_epoch`: the term it believes it leads (None as a
    standby). A term that ended here but not in the database (this process stepped down: its
    local deadline passed, a write was fenced) is taken again with a new epoch, as is one
    that ran out in the database: a new term means a fresh reconciliation, and whatever the
    old term still had going is fenced by its epoch."""
    if expired(lease, now) or (lease.holder == me and lease.epoch != my_epoch):
        return Step.TAKE
    if lease.holder == me:
        return Step.RENEW
    return Step.WAIT


def expires(now: datetime, lease_s: float) -> datetime:
    return now + timedelta(seconds=lease_s)


def local_deadline(attempt_started: float, lease_s: float) -> float:
    """The monotonic instant after which this process may not act without a new attempt."""
    return attempt_started + lease_s * (1 - MARGIN_FRACTION)


def may_act(role: Role, deadline: float | None, monotonic_now: float) -> bool:
    """A cloud call or a write may go: this process leads and its local deadline is ahead."""
    return role is Role.LEADER and deadline is not None and monotonic_now < deadline


def attempt_interval(lease_s: float) -> float:
    """How often a process tries the lease: a holder renews well inside its term; a standby
    tries as often, so it takes over at most this long after the lease ran out."""
    return lease_s / RENEW_DIVISOR


# The lease when the config does not set one: 15 s, or a poll and a half when that is longer
# (a poll of up to 10 minutes is allowed, and a lease must outlast one).
DEFAULT_LEASE_S = 15.0


def default_lease(poll_s: float) -> float:
    """`daemon.lease` when the config leaves it out."""
    return max(DEFAULT_LEASE_S, 1.5 * poll_s)


def lease_problem(lease_s: float, poll_s: float) -> str | None:
    """What is wrong with `daemon.lease` next to `daemon.poll_interval`, if anything: a lease
    no longer than one poll would lapse during an ordinary tick."""
    if lease_s <= poll_s:
        return f"must be longer than daemon.poll_interval ({poll_s:g}s)"
    return None


def stale(lease: Lease, now: datetime, lease_s: float | None = None) -> str | None:
    """Why `status` should warn about the lease, if it should: no leader, or a leader whose
    last renewal is older than its lease (a daemon that died or hangs; a standby should have
    taken over by then)."""
    if lease.holder is None:
        return "no daemon has ever led on this database"
    if lease.renewed_at is None or lease.expires_at is None:
        return "the lease was never renewed"
    if lease.expires_at <= now:
        age = (now - lease.renewed_at).total_seconds()
        return f"no daemon leads: the lease was last renewed {age:.0f}s ago and has expired"
    if lease_s is not None and (now - lease.renewed_at).total_seconds() > lease_s:
        age = (now - lease.renewed_at).total_seconds()
        return f"the leader's last renewal is {age:.0f}s old, older than the lease ({lease_s:g}s)"
    return None
