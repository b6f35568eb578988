"""What a cloud state means to the planner.

Each cloud adapter sorts its node states into the core's `StateClass` (usable, dead, being
deleted, being created, transient, waiting, unreadable: core/model/observed.py) in one table
of its own (the TPU API's: tpucared/gcp/tpu/states.py); the node and strays sub-planners
(core/nodes/incarnations.py, core/nodes/strays.py) decide on those classes only, and
core/vocab/stuck.py holds the timeouts of the transient ones; a queued slot's state comes
the same way as a `QueuedPhase` beside the cloud's own name. This module holds what is left
of the cloud's own vocabulary the core reads: `Node.Health` values, and the pseudo states
the planner stores in `IncarnationRecord.cloud_state` when there is no node to show a state.
"""

from __future__ import annotations

from tpucared.core.model.observed import ObservedNode
from tpucared.core.vocab.actions import Notice, Severity

# Health values that make a READY node unusable once they last longer than
# `Policy.unhealthy_grace`. UNHEALTHY_TENSORFLOW concerns the legacy TF server, not TPU VMs.
UNHEALTHY: frozenset[str] = frozenset({"UNHEALTHY_MAINTENANCE", "TIMEOUT"})

# Pseudo values of IncarnationRecord.cloud_state, so that `cloud_state_since` can time them:
# ABSENT: a successful list showed neither the node nor its queued resource.
ABSENT = "ABSENT"
# QUEUED:<state>: only the queued resource exists (no node yet), in that state.
QUEUED_PREFIX = "QUEUED:"


def queued_pseudo_state(state: str) -> str:
    """`QUEUED:<state>`, the queued slot's state in its cloud's own words."""
    return f"{QUEUED_PREFIX}{state}"


def is_unhealthy(health: str | None) -> bool:
    return health in UNHEALTHY


def unrecognized_notice(node: ObservedNode, fleet: str | None) -> Notice:
    """The one notice about a node whose state could not be read (`StateClass.UNREADABLE`),
    told once per value."""
    return Notice(
        key=f"unrecognized-state/{node.zone}/{node.name}/{node.raw_state}",
        severity=Severity.WARNING,
        fleet=fleet,
        node=node.name,
        reason=f"node {node.name} in {node.zone} shows a state tpucared cannot read "
        f"({node.raw_state}); it is left exactly as it is until its state reads again",
    )
