"""What a cloud state means to the planner.

The TPU API reports a `Node.State`, a `Node.Health` and, for queued provisioning, a
`QueuedResourceState`. This module sorts those into the few classes the planner decides on
(usable, dead, being deleted, transient, waiting), and names the pseudo states the planner
stores in `IncarnationRecord.cloud_state` when there is no node to show a state. The node
and strays sub-planners (core/nodes/incarnations.py, core/nodes/strays.py) decide with these
classes; core/vocab/stuck.py holds the timeouts of the transient ones.
"""

from __future__ import annotations

from tpucared.core.model.observed import CloudState, ObservedNode, QueuedState
from tpucared.core.vocab.actions import Notice, Severity

C = CloudState
Q = QueuedState

# A node in one of these states is dead: it will not come back by itself and still holds its
# name and quota, so it is deleted at once. STOPPED: tpucared never stops nodes and
# spot/preemptible TPUs cannot be restarted.
DEAD_STATES: frozenset[CloudState] = frozenset({C.PREEMPTED, C.TERMINATED, C.STOPPED})

# States a node passes through and should leave by itself; each has a timeout in
# core/vocab/stuck.py, after which the node counts as dead. STATE_UNSPECIFIED is a blip, not a
# verdict; UNKNOWN is the API not knowing for now: dead only after its grace ("unknown").
# UNRECOGNIZED is in no class: a state we cannot read is never acted on (`unrecognized_notice`).
TRANSIENT_STATES: frozenset[CloudState] = frozenset(
    {
        C.CREATING,
        C.RESTARTING,
        C.REIMAGING,
        C.REPAIRING,
        C.STARTING,
        C.STOPPING,
        C.HIDING,
        C.HIDDEN,
        C.UNHIDING,
        C.STATE_UNSPECIFIED,
        C.UNKNOWN,
    }
)

# Health values that make a READY node unusable once they last longer than
# `Policy.unhealthy_grace`. UNHEALTHY_TENSORFLOW concerns the legacy TF server, not TPU VMs.
UNHEALTHY: frozenset[str] = frozenset({"UNHEALTHY_MAINTENANCE", "TIMEOUT"})

# Queued resource states: still waiting for capacity (no node yet), provisioning the node,
# holding a node, or finished without one (FAILED, SUSPENDING, SUSPENDED keep holding quota
# and the name until the queued resource is deleted).
QUEUED_WAITING: frozenset[QueuedState] = frozenset(
    {Q.STATE_UNSPECIFIED, Q.CREATING, Q.ACCEPTED, Q.WAITING_FOR_RESOURCES}
)
QUEUED_DEAD: frozenset[QueuedState] = frozenset({Q.FAILED, Q.SUSPENDING, Q.SUSPENDED})

# Pseudo values of IncarnationRecord.cloud_state, so that `cloud_state_since` can time them:
# ABSENT: a successful list showed neither the node nor its queued resource.
ABSENT = "ABSENT"
# QUEUED:<state>: only the queued resource exists (no node yet), in that state.
QUEUED_PREFIX = "QUEUED:"


def queued_pseudo_state(state: QueuedState) -> str:
    return f"{QUEUED_PREFIX}{state.value}"


def is_unhealthy(health: str | None) -> bool:
    return health in UNHEALTHY


def unrecognized_notice(node: ObservedNode, fleet: str | None) -> Notice:
    """The one notice about a node whose state could not be read (told once per value)."""
    return Notice(
        key=f"unrecognized-state/{node.zone}/{node.name}/{node.raw_state}",
        severity=Severity.WARNING,
        fleet=fleet,
        node=node.name,
        reason=f"node {node.name} in {node.zone} shows a state tpucared cannot read "
        f"({node.raw_state}); it is left exactly as it is until its state reads again",
    )
