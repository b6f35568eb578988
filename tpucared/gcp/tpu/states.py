"""The TPU API's node states, and the one table saying what each means to the core.

`NodeState` is `Node.State` of the TPU v2 API by name (plus our UNRECOGNIZED). `NODE_STATES`
sorts every one into the core's `StateClass` (tpucared/core/model/observed.py) and names the
`[policy.timeouts]` rule (core/vocab/stuck.py) that times it while it should end by itself.
convert.py puts both on each `ObservedNode`, next to the state's own name, which is what
`IncarnationRecord.cloud_state` stores (unchanged: these strings are in databases).

- READY is USABLE; PREEMPTED, TERMINATED and STOPPED are DEAD (tpucared never stops nodes,
  and spot / preemptible TPUs cannot be restarted); DELETING is DELETING.
- CREATING is CREATING, timed by "creating" (from the accepted create while pending).
- The maintenance states are TRANSIENT, each timed by its own rule; STATE_UNSPECIFIED is a
  blip, not a verdict ("unspecified"); UNKNOWN is the API not knowing for now ("unknown").
- UNRECOGNIZED (a state we cannot read) is UNREADABLE: never acted on, and not the API's
  own UNKNOWN, which is a state we understand.

`QueuedState` is `QueuedResourceState.State` by name; `QUEUED_PHASES` says where each leaves
the queued slot in the core's words (`QueuedPhase`), and `queued_fields` puts both on an
`ObservedQueuedResource` (the state's own name is what `cloud_state` stores as `QUEUED:<state>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import QueuedPhase, StateClass


class NodeState(StrEnum):
    """Node.State of the TPU v2 API, by name."""

    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    CREATING = "CREATING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    REIMAGING = "REIMAGING"
    DELETING = "DELETING"
    REPAIRING = "REPAIRING"
    STOPPED = "STOPPED"
    STOPPING = "STOPPING"
    STARTING = "STARTING"
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"
    HIDING = "HIDING"
    HIDDEN = "HIDDEN"
    UNHIDING = "UNHIDING"
    UNKNOWN = "UNKNOWN"
    # Ours, not the API's: a state value we cannot read (a new enum name, a number we do not
    # know, an object). The node is never acted on while it shows one; `raw_state` keeps
    # what was sent, for the notice. The API's own UNKNOWN is a state we understand.
    UNRECOGNIZED = "UNRECOGNIZED"


S = NodeState
K = StateClass

# state -> (its class, the stuck-timeout rule that times it, if any).
NODE_STATES: Mapping[NodeState, tuple[StateClass, str | None]] = {
    S.READY: (K.USABLE, None),
    S.PREEMPTED: (K.DEAD, None),
    S.TERMINATED: (K.DEAD, None),
    S.STOPPED: (K.DEAD, None),
    S.DELETING: (K.DELETING, None),
    S.CREATING: (K.CREATING, "creating"),
    S.REPAIRING: (K.TRANSIENT, "repairing"),
    S.RESTARTING: (K.TRANSIENT, "restarting"),
    S.REIMAGING: (K.TRANSIENT, "reimaging"),
    S.STARTING: (K.TRANSIENT, "starting"),
    S.STOPPING: (K.TRANSIENT, "stopping"),
    S.HIDING: (K.TRANSIENT, "hiding"),
    S.HIDDEN: (K.TRANSIENT, "hiding"),
    S.UNHIDING: (K.TRANSIENT, "hiding"),
    S.STATE_UNSPECIFIED: (K.TRANSIENT, "unspecified"),
    S.UNKNOWN: (K.TRANSIENT, "unknown"),
    S.UNRECOGNIZED: (K.UNREADABLE, None),
}


# The states that say why a node was lost (ObservedNode.lost_to, core/nodes/losses.py).
LOST_TO: Mapping[NodeState, LossCause] = {S.PREEMPTED: LossCause.PREEMPTED}


def state_fields(state: NodeState) -> dict[str, Any]:
    """An `ObservedNode`'s state, class, stuck rule and `lost_to` for `state`: how
    convert.py (and any test or fake building observations of TPU nodes) fills them, from
    the one table."""
    cls, rule = NODE_STATES[state]
    return {"state": state, "state_class": cls, "stuck_rule": rule, "lost_to": LOST_TO.get(state)}


class QueuedState(StrEnum):
    """QueuedResourceState.State of the TPU v2 API, by name."""

    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    CREATING = "CREATING"
    ACCEPTED = "ACCEPTED"
    PROVISIONING = "PROVISIONING"
    FAILED = "FAILED"  # stays until deleted and keeps holding quota
    DELETING = "DELETING"
    ACTIVE = "ACTIVE"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"  # its nodes were deleted (e.g. spot preemption); holds quota
    WAITING_FOR_RESOURCES = "WAITING_FOR_RESOURCES"


Q = QueuedState
QP = QueuedPhase

# Each queued state's phase: still waiting for capacity (no node yet; an unspecified state is
# "not settled yet"), provisioning its nodes, holding them, finished without them (FAILED,
# SUSPENDING, SUSPENDED keep holding quota and the name until deleted), or going away.
QUEUED_PHASES: Mapping[QueuedState, QueuedPhase] = {
    Q.STATE_UNSPECIFIED: QP.WAITING,
    Q.CREATING: QP.WAITING,
    Q.ACCEPTED: QP.WAITING,
    Q.WAITING_FOR_RESOURCES: QP.WAITING,
    Q.PROVISIONING: QP.PROVISIONING,
    Q.ACTIVE: QP.ACTIVE,
    Q.FAILED: QP.DEAD,
    Q.SUSPENDING: QP.DEAD,
    Q.SUSPENDED: QP.DEAD,
    Q.DELETING: QP.DELETING,
}


def queued_fields(state: QueuedState) -> dict[str, Any]:
    """An `ObservedQueuedResource`'s state and phase for `state`, from the one table."""
    return {"state": state, "phase": QUEUED_PHASES[state]}
