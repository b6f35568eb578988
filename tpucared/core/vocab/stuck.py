"""Timeouts for states that should end by themselves, as one table.

Each rule names a transient situation (one of our phases, a cloud state of the node, or a
queued resource state: the rule names of cloud states are each adapter's to give, in its
state table), how long it may last, and what the planner does once it lasted
longer. The clock for a phase is `IncarnationRecord.phase_since`; for a cloud or queued state
it is `cloud_state_since`; for a repeated delete it is `last_delete_at`. Config can override
any timeout by rule name in `[policy.timeouts]` ("never" disables one); `core/vocab/policy.py`
holds the effective values. The planner never sleeps: it compares these against `now`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from tpucared.core.model.observed import QueuedPhase
from tpucared.core.model.records import NodePhase


@dataclass(frozen=True)
class StuckRule:
    name: str  # the key in [policy.timeouts]
    situation: str  # what is being timed, for people
    timeout: timedelta | None  # None: wait forever
    then: str  # what the planner does when the timeout passes


def _m(minutes: float) -> timedelta:
    return timedelta(minutes=minutes)


STUCK_RULES: tuple[StuckRule, ...] = (
    # The create call's outcome was never recorded (the daemon died mid-call, or the call hung):
    # the node may or may not exist. Failing it is safe: a node that shows up with our labels
    # is adopted, and a second create of the same name gets ALREADY_EXISTS, never a twin.
    StuckRule("requested", "phase requested, node not listed", _m(5), "fail the create; retry"),
    # Accepted but not READY. Large pods take 10-15 minutes to come up.
    StuckRule("creating", "phase creating / cloud CREATING", _m(30), "dead: delete, recreate"),
    # Queued resources wait for capacity for as long as it takes: that is their point.
    StuckRule("queued", "queued resource waiting for capacity", None, "dead: delete, recreate"),
    StuckRule("provisioning", "queued resource PROVISIONING", _m(60), "dead: delete, recreate"),
    # A delete that has not made the node disappear: issue it again (the previous operation
    # may have failed silently); after Policy.max_delete_calls a person is told.
    StuckRule("deleting", "phase deleting, node still listed", _m(15), "delete again"),
    # Cloud-side maintenance states of a node we consider usable.
    StuckRule("repairing", "cloud REPAIRING", _m(30), "dead: delete, recreate"),
    StuckRule("restarting", "cloud RESTARTING", _m(20), "dead: delete, recreate"),
    StuckRule("reimaging", "cloud REIMAGING", _m(30), "dead: delete, recreate"),
    StuckRule("starting", "cloud STARTING", _m(20), "dead: delete, recreate"),
    StuckRule("stopping", "cloud STOPPING", _m(20), "dead: delete, recreate"),
    StuckRule("hiding", "cloud HIDING, HIDDEN or UNHIDING", _m(30), "dead: delete, recreate"),
    StuckRule("unspecified", "cloud STATE_UNSPECIFIED", _m(10), "dead: delete, recreate"),
    StuckRule("unknown", "cloud UNKNOWN (the API's own)", _m(10), "dead: delete, recreate"),
)

DEFAULT_TIMEOUTS: Mapping[str, timedelta | None] = {r.name: r.timeout for r in STUCK_RULES}
RULES_BY_NAME: Mapping[str, StuckRule] = {r.name: r for r in STUCK_RULES}

# Which rule times a phase of ours (phases absent here are either terminal or timed by the
# cloud state of the node, like READY).
PHASE_RULE: Mapping[NodePhase, str] = {
    NodePhase.REQUESTED: "requested",
    NodePhase.CREATING: "creating",
    NodePhase.DELETING: "deleting",
}

# Which rule times a transient cloud state of a node: the cloud adapter's table says
# (`ObservedNode.stuck_rule`; the TPU API's in tpucared/gcp/tpu/states.py).

# Which rule times a queued resource that has no node yet.
QUEUED_RULE: Mapping[QueuedPhase, str] = {
    QueuedPhase.WAITING: "queued",
    QueuedPhase.PROVISIONING: "provisioning",
    QueuedPhase.ACTIVE: "creating",  # active but its node is not listed yet
}


def with_overrides(
    overrides: Mapping[str, timedelta | None],
) -> Mapping[str, timedelta | None]:
    """The default timeouts with some replaced by name; unknown names are a ValueError."""
    unknown = sorted(set(overrides) - set(DEFAULT_TIMEOUTS))
    if unknown:
        raise ValueError(f"unknown stuck-state timeout(s): {', '.join(unknown)}")
    return {**DEFAULT_TIMEOUTS, **overrides}
