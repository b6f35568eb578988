"""The `preemption.notice` event of a notice the poll's probe read before the notice watch.

Where it sits: the workload executor (executor.py) calls `record_heard` in the transaction
that ends an attempt (FinishAttempt). The notice watch (notices.py) records the event when it
hears a notice; a run that stops within milliseconds of its notice can reach the poll's probe
first, the planner ends the attempt on the probe's word (core/workload/notices.py
`heard_notices`), the node is deleted and the watch's answer never comes. Both paths write
with `append_event_once`, so each node has its event whichever came first, and only one.
"""

from __future__ import annotations

from datetime import datetime

from tpucared.core.workload.actions import FinishAttempt
from tpucared.core.workload.inputs import NoticeKind
from tpucared.store import Tx


async def record_heard(tx: Tx, a: FinishAttempt, now: datetime) -> None:
    """In the attempt's end's transaction: the `preemption.notice` event of each node whose
    notice the probe read (`a.notices`) and the watch did not record (the module docstring)."""
    for notice in a.notices:
        maintenance = notice.kind is NoticeKind.MAINTENANCE
        what = "host-maintenance notice" if maintenance else "preemption notice"
        await tx.append_event_once(
            "preemption.notice",
            f"{notice.node_name}: {what} on {a.fleet}/{a.slot} (attempt {a.attempt}), read by "
            "the probe: the workload had already stopped",
            now,
            fleet=a.fleet,
            slot=a.slot,
            node=notice.node_name,
            incarnation_id=notice.incarnation_id,
            details={"notice_at": notice.at.isoformat(), "attempt": a.attempt,
                     "kind": notice.kind or NoticeKind.PREEMPTED, "heard_by": "probe"},
        )  # fmt: skip
