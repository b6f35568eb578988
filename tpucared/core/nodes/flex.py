"""A flex-start node's run end: neither a preemption nor a failure.

A flex-start Compute Engine VM or slice (`capacity = "flex-start"`, issue 28) runs at most its
fleet's `max_run_duration`; the cloud says when (`ObservedNode.run_ends_at`, recorded on the
incarnation: `IncarnationRecord.run_ends_at`) and deletes it then (STOPPING, then gone).
`die` (core/nodes/step.py) asks `run_ended` before it ends a READY node lost to a dead state
or a vanishing: a loss at or after `run_ends_at - RUN_END_LAG` is the run's end, ended with
`RUN_ENDED` and `run_over` (the slot asks again at once, no preemption counted, no preemption
record asked for, no create backoff), and the store writes its own `node.run_ended` event.
The workload's attempt on it ends as for a preemption (core/workload/judge.py `_off_node`):
not charged, the next attempt relaunches on the next node.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import FleetSpec
from tpucared.core.view import View
from tpucared.core.vocab.actions import SlotUpdate

# The end reason (and the store's event `node.run_ended`) of a flex-start run's end.
RUN_ENDED = "run ended"
# How early a loss still counts as the run's end: Google's limit-VM-runtime page says the
# termination "can lag the limit by up to 30 s" (docs/research/compute-engine.md §6.9); the
# planned end and the cloud's own clock may differ by as much the other way.
RUN_END_LAG = timedelta(seconds=30)


def run_ended(spec: FleetSpec | None, run_ends_at: datetime | None, lost_at: datetime) -> bool:
    """Whether losing a READY node at `lost_at` (when the lists first showed it dead or gone)
    is the end of its flex-start run: its fleet asks for flex-start, the cloud said when the
    run ends (`run_ends_at`), and the loss is at or after that, less `RUN_END_LAG`."""
    if spec is None or not spec.flex_start or run_ends_at is None:
        return False
    return lost_at >= run_ends_at - RUN_END_LAG


def how(run_ends_at: datetime | None) -> str:
    """The run's end in a transition's reason."""
    when = "?" if run_ends_at is None else run_ends_at.strftime("%Y-%m-%d %H:%M:%SZ")
    return f"the flex-start run ended (planned end {when})"


def run_over(view: View, inc: IncarnationRecord) -> SlotUpdate:
    """The slot after its node's run ended: no preemption, no failure, the next create at
    once (the counters and zone as they were)."""
    slot = view.slot(inc.fleet, inc.slot)
    return SlotUpdate(
        fleet=inc.fleet,
        slot=inc.slot,
        create_failures=slot.create_failures,
        next_create_at=None,
        next_zone=slot.next_zone,
        last_error=slot.last_error,
        add_preemptions=0,
    )
