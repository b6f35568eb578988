"""The planner's tunables: create budgets, backoffs, graces and stuck-state timeouts.

`Policy()` holds sensible defaults; `tpucared.config` builds one from the optional
`[policy]` section. The planner reads it and nothing else reads the clock or the config.
Which backoff follows which error kind is decided here, in `backoff_for`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from tpucared.core.model.backoff import BackoffRule
from tpucared.core.model.specs import ErrorKind
from tpucared.core.vocab.stuck import DEFAULT_TIMEOUTS

_S = timedelta(seconds=1)
_M = timedelta(minutes=1)

# Errors a person must fix (quota, IAM, a wrong accelerator type or zone): retrying quickly
# only burns API quota and log lines, so they get the long backoff and a notice.
HARD_ERRORS: frozenset[ErrorKind] = frozenset(
    {ErrorKind.QUOTA, ErrorKind.PERMISSION, ErrorKind.INVALID, ErrorKind.NOT_FOUND}
)

# Defaults (module constants: a frozen rule is safe to share between Policy instances).
# Capacity: a near-constant 3.6-4 s from one create's post to the next (a pace, not a sleep
# after the failure is seen: docs/daemon.md, "API requests"). Capacity comes back at a moment
# nobody can predict, and a lone slot's wait for it is about half its create-to-create cycle:
# ~1.9 s, at one create and one operation poll per cycle (~32 requests/min, ~38 with the
# poll's lists). Full jitter at the same request rate has a longer tail (its long draws weigh
# in E[C^2] / 2E[C]); the 10 % that stays random still keeps the slots of a fleet from
# retrying in step. No doubling: a stockout does not get worse for being retried, and
# capacity may return at any minute.
CAPACITY_BACKOFF = BackoffRule(base=4 * _S, cap=4 * _S, jitter=0.1)
TRANSIENT_BACKOFF = BackoffRule(base=5 * _S, cap=2 * _M)
ERROR_BACKOFF = BackoffRule(base=10 * _M, cap=30 * _M, floor=10 * _M)
# A create whose result cannot be used (ErrorKind.DEFECTIVE): 30 s doubling to 30 min. Each
# try pays for a whole slice from its create to its delete, and what made it defective (a
# zone's partial capacity, a cloud behaving as we do not expect) rarely clears in seconds;
# issue 39 saw 49 paid slice creates in 4 minutes at capacity's pace.
DEFECT_BACKOFF = BackoffRule(base=30 * _S, cap=30 * _M)
# The failed creates in a row (the slot's create_failures) at which a defective one is told.
DEFECT_NOTICE_AFTER = 3


@dataclass(frozen=True)
class Policy:
    # Create requests sent in any 60 s, per cloud API and project: the limit that binds by
    # default (core/nodes/create_rate.py). Under the ~91 a minute the TPU API is reported to
    # allow per project (docs/daemon.md, "Request quotas").
    creates_per_minute: int = 60
    # Creates in flight (incarnations in REQUESTED, or CREATING by direct provisioning) across
    # all fleets and per fleet. Queued resources waiting for capacity do not count: queueing
    # every slot at once is their point. High enough that the rate binds: a real create takes
    # minutes, so 60 a minute means up to a few hundred in flight.
    max_creates: int = 256
    max_creates_per_fleet: int = 256
    # After a stockout: try the next zone at once; once every zone of the fleet failed in a
    # row, create again 3.6-4 s after the last create was posted (capacity frees at any
    # moment; be there first). The API cost is
    # bounded by creates_per_minute, whatever the number of slots hunting.
    capacity_backoff: BackoffRule = CAPACITY_BACKOFF
    # Rate limits, conflicts, 5xx, and creates whose outcome was never recorded.
    transient_backoff: BackoffRule = TRANSIENT_BACKOFF
    # Quota, permission, invalid requests, unknown zones or types: 10 to 30 minutes.
    error_backoff: BackoffRule = ERROR_BACKOFF
    # Creates that made something unusable (a slice never whole): 30 s doubling to 30 min.
    defect_backoff: BackoffRule = DEFECT_BACKOFF
    # A create accepted but never listed is not "vanished" before this (list-after-create
    # consistency); a node that was listed must be missing this long before it counts as
    # vanished (one odd list must not cost a pod).
    create_grace: timedelta = 2 * _M
    vanish_grace: timedelta = 20 * _S
    # A READY node whose health is UNHEALTHY_MAINTENANCE or TIMEOUT this long is dead.
    unhealthy_grace: timedelta = 10 * _M
    # Delete calls for one incarnation before a person is told (retries continue).
    max_delete_calls: int = 5
    # Stuck-state timeouts by rule name (core/vocab/stuck.py); None waits forever.
    timeouts: Mapping[str, timedelta | None] = field(default_factory=lambda: DEFAULT_TIMEOUTS)

    def __post_init__(self) -> None:
        if min(self.max_creates, self.max_creates_per_fleet, self.creates_per_minute) < 1:
            raise ValueError("create limits must be at least 1")
        if self.max_delete_calls < 1:
            raise ValueError("max_delete_calls must be at least 1")
        missing = set(DEFAULT_TIMEOUTS) - set(self.timeouts)
        if missing:
            raise ValueError(f"timeouts missing: {sorted(missing)}")

    def timeout(self, rule: str) -> timedelta | None:
        return self.timeouts[rule]

    def backoff_for(self, kind: ErrorKind) -> BackoffRule:
        if kind is ErrorKind.CAPACITY:
            return self.capacity_backoff
        if kind in HARD_ERRORS:
            return self.error_backoff
        if kind is ErrorKind.DEFECTIVE:
            return self.defect_backoff
        return self.transient_backoff
