"""What the workload rules see of one slot at one tick (`SlotWork`), and their tunables.

`WorkloadPolicy` holds the graces and the crash backoff the rules apply; `SlotWork` is one
slot's facts at one tick, which core/planning/tick.py builds for every slot with a workload.
Both are read by the sub-planner (`plan_slot`, core/workload/planner.py) and by the judge of a
running attempt (core/workload/judge.py), which the planner calls: they live here, below both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tpucared.core.model.backoff import BackoffRule
from tpucared.core.model.records import (
    IncarnationRecord,
    NodePhase,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.workload.gang import Gang
from tpucared.core.workload.inputs import SlotProbe

_S = timedelta(seconds=1)
_M = timedelta(minutes=1)

# 10 s, then doubling up to 5 min (SkyPilot relaunches after 60 s x1.6 up to 300 s; a slice
# that crashes at start-up should come back sooner the first time).
CRASH_BACKOFF = BackoffRule(base=10 * _S, cap=5 * _M, floor=10 * _S)


@dataclass(frozen=True)
class WorkloadPolicy:
    crash_backoff: BackoffRule = CRASH_BACKOFF
    # A run that lasted this long before failing was no crash loop: relaunch at once.
    stable_after: timedelta = 10 * _M
    # A recorded attempt that some workers never started (daemon crash mid-launch, an SSH
    # error) is launched there again until this long after its start; then it failed.
    launch_grace: timedelta = 2 * _M
    # Workers that exited 0 while others still run: how long the others get to finish.
    exit_grace: timedelta = 1 * _M
    # A READY node with a worker that SSH cannot reach this long is replaced. Generous: a new
    # node's sshd and keys take a minute or two, and the API may still catch up (PREEMPTED).
    unreachable_grace: timedelta = 5 * _M

    def __post_init__(self) -> None:
        graces = (self.stable_after, self.launch_grace, self.exit_grace, self.unreachable_grace)
        if any(g < timedelta(0) for g in graces):
            raise ValueError(f"negative grace in {self}")


@dataclass(frozen=True)
class SlotWork:
    """Everything the rules see of one slot at one tick."""

    fleet: str
    index: int
    spec: WorkloadSpec | None  # None: the fleet has no workload (any more)
    slot: SlotRecord | None  # None: not opened yet
    node: IncarnationRecord | None  # the slot's live incarnation, as stored
    phase_after: NodePhase | None  # its phase once this tick's node actions are applied
    workers: int  # workers recorded for `node`
    last: WorkloadAttemptRecord | None  # the slot's newest attempt
    probe: SlotProbe | None  # this tick's probe of `node` (tracked), if any
    unwanted: str | None  # why the slot should have no node (core/view.py), or None
    now: datetime
    # A multislice slot's slices (core/workload/gang.py); `node`, `phase_after` and `workers`
    # are then the gang's stand-in, its phase and its workers. None for a single slice.
    gang: Gang | None = None
    zones: tuple[str, ...] = ()  # the fleet's zones, in order (a bad host's next zone)
