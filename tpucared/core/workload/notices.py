"""A preemption notice heard on one slice: which runs get the stop signal, and how long to wait.

Where it sits: the runtime's notice watch (runtime/workload/notices.py) waits on worker 0 of
every slice of a running attempt. When one slice's run hears its notice, that run's own
watcher (launch/sh/run.sh) has already sent it `workload.stop_signal`; `on_notice` says what
the daemon does about it, and the runtime only carries it out:

- a multislice job checkpoints and stops as one: every *other* slice's run gets the same
  signal at once (their VMs got no notice, and a gang runs on all slices or none); a single
  slice has no other to tell;
- the workload has `workload.stop_grace` from the notice (the worker's clock) to stop; the
  runtime then waits on the noticed slice until the run stopped, at most until `stop_by`
  plus `STOP_SLACK` (for the run's exit to be written), and asks for a probe: the planner
  then ends the attempt as PREEMPTED (core/workload/judge.py).

A run may stop within milliseconds of its notice, and the poll's probe can read it stopped
before the watch's answer arrives: the planner then ends the attempt on the probe's word, and
`heard_notices` names the notices the probe read, so that the attempt's end records the
`preemption.notice` event the watch did not (FinishAttempt, core/workload/actions.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.workload.actions import HeardNotice
from tpucared.core.workload.inputs import NoticeKind, WorkerProbe

# After `stop_grace`, a little longer for the stopped run's exit to reach its run directory.
STOP_SLACK = timedelta(seconds=0.5)


@dataclass(frozen=True)
class NoticeResponse:
    """What the daemon does when slice `heard` of a running job hears its notice."""

    heard: int  # the slice (index in the job's slices) whose run heard the notice
    signal: str  # the signal the other slices' runs get (the run's watcher sent it to its own)
    others: tuple[int, ...]  # the slices whose runs get `signal` now, in order
    notice_at: datetime  # when the run heard it (the worker's clock)
    stop_by: datetime  # the workload has until then to stop: notice + stop_grace

    def wait_for_stop(self, now: datetime) -> float:
        """Seconds to wait from `now` for the run to stop: until `stop_by` plus the slack,
        at least the slack (a notice heard late has no grace left, only the slack)."""
        return (max(self.stop_by - now, timedelta(0)) + STOP_SLACK).total_seconds()


def on_notice(heard: int, slices: int, spec: WorkloadSpec, notice_at: datetime) -> NoticeResponse:
    """The response to a notice heard at `notice_at` on slice `heard` of a job on `slices`
    slices (the module docstring)."""
    if not 0 <= heard < slices:
        raise ValueError(f"slice {heard} of a job on {slices} slice(s)")
    return NoticeResponse(
        heard=heard,
        signal=spec.stop_signal,
        others=tuple(i for i in range(slices) if i != heard),
        notice_at=notice_at,
        stop_by=notice_at + timedelta(seconds=spec.stop_grace),
    )


def heard_notices(
    workers: Iterable[WorkerProbe], nodes: Iterable[IncarnationRecord]
) -> tuple[HeardNotice, ...]:
    """The notice the probe read on `workers`, once per node lost to it: the earliest
    worker's time, and MAINTENANCE when any worker heard a host-maintenance termination."""
    noticed = [(p.notice_at, p.notice_kind) for p in workers if p.notice_at is not None]
    if not noticed:
        return ()
    at = min(when for when, _ in noticed)
    kind = NoticeKind.MAINTENANCE if NoticeKind.MAINTENANCE in (k for _, k in noticed) else None
    return tuple(HeardNotice(n.id, n.node_name, at, kind) for n in nodes)
