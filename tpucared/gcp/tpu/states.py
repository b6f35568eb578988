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
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import StateClass


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
