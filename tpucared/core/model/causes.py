"""Why a node or a run was lost: one vocabulary for every loss (issue 41, item 4).

Recorded on the incarnation (`IncarnationRecord.loss_cause`, column `nodes.loss_cause`,
migration 0012) and in the event that records the loss (`details.cause`), counted per cause in
`/metrics` and `tpucared status`. Where the cloud's own record tells the cause (a preemption or
host-maintenance operation, the announced maintenance) it is used; where nothing tells it, the
cause is `UNKNOWN`, never a guess. Only `CRASH` (the workload's own failure) spends the slot's
`max_failures`; `BAD_HOST` has its own budget (`max_bad_hosts`).
"""

from __future__ import annotations

from enum import StrEnum


class LossCause(StrEnum):
    PREEMPTED = "preempted"  # spot / preemptible capacity taken back
    MAINTENANCE = "maintenance"  # host maintenance (announced, started early, or recorded)
    RUN_ENDED = "run_ended"  # a flex-start run reached its planned end
    BAD_HOST = "bad_host"  # its workers failed the pre-launch check: recycled
    DELETED_OUTSIDE = "deleted_outside"  # someone else's delete
    STUCK = "stuck"  # a state held past its timeout
    CRASH = "crash"  # the workload failed (or hung) on a healthy node
    UNKNOWN = "unknown"  # lost, and nothing tells why


CAUSES: tuple[LossCause, ...] = tuple(LossCause)
