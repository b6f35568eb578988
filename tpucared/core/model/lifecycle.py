"""The node-incarnation lifecycle as an explicit state machine.

`TRANSITIONS` is the single table of allowed edges between `NodePhase`s. The store calls
`check_transition` before every phase write (together with a compare-and-set on the phase it
read), so an illegal or stale transition can never reach the database; the planner only ever
proposes edges from this table.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpucared.core.model.records import NodePhase

P = NodePhase

TRANSITIONS: Mapping[NodePhase, frozenset[NodePhase]] = {
    P.REQUESTED: frozenset(
        {
            P.CREATING,  # the API accepted the create (or ALREADY_EXISTS with our labels: adopt)
            P.READY,  # adopted after a restart: the node is already READY in the cloud
            P.FAILED,  # the create was refused (capacity, quota, invalid...) or never confirmed
            P.DEAD,  # the node showed up already PREEMPTED/TERMINATED
            P.DELETING,  # slot removed before the create was confirmed: delete whatever exists
        }
    ),
    P.CREATING: frozenset(
        {
            P.READY,  # the node reached READY
            P.FAILED,  # the create operation finished with an error (no capacity: code 8)
            P.DEAD,  # preempted while creating, vanished, or stuck past its timeout
            P.DELETING,  # scale-down or `tpucared down` while still creating
        }
    ),
    P.READY: frozenset(
        {
            P.DEAD,  # preempted, terminated, vanished, unhealthy or stuck
            P.DELETING,  # planned removal: scale-down, `down`, workload done, device wedged
        }
    ),
    P.DEAD: frozenset(
        {
            P.DELETING,  # the delete was issued
            P.DELETED,  # nothing left to delete (vanished, or the delete found NOT_FOUND)
        }
    ),
    P.DELETING: frozenset(
        {
            P.DELETED,  # the node is gone from the list, or the delete operation finished
        }
    ),
    P.DELETED: frozenset(),  # terminal
    P.FAILED: frozenset(),  # terminal: a new incarnation is requested instead
}

# Phases in which an incarnation may still have (or get) a node in the cloud.
LIVE_PHASES: frozenset[NodePhase] = frozenset(
    {P.REQUESTED, P.CREATING, P.READY, P.DEAD, P.DELETING}
)
# Phases waiting for a create to end: asked for, not yet READY.
PENDING_PHASES: frozenset[NodePhase] = frozenset({P.REQUESTED, P.CREATING})
# Phases that serve their slot: a node wanted, coming, or up.
SERVING_PHASES: frozenset[NodePhase] = PENDING_PHASES | {P.READY}


class IllegalTransition(ValueError):
    """A write tried an edge that is not in TRANSITIONS."""

    def __init__(self, current: NodePhase, new: NodePhase) -> None:
        super().__init__(f"illegal node transition {current.value} -> {new.value}")
        self.current = current
        self.new = new


def can_transition(current: NodePhase, new: NodePhase) -> bool:
    return new in TRANSITIONS[current]


def check_transition(current: NodePhase, new: NodePhase) -> None:
    if not can_transition(current, new):
        raise IllegalTransition(current, new)


def is_terminal(phase: NodePhase) -> bool:
    return not TRANSITIONS[phase]
