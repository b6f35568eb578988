"""The preemption notice in the workload planner: the attempt is PREEMPTED (never a failure)
once every worker stopped or `stop_grace` passed, and the node is dead to us at once, its
preemption counted once; until then the workload is left to checkpoint."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tpucared.core.model.records import AttemptOutcome, NodePhase
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.vocab.actions import DeleteNode, Transition
from tpucared.core.workload.inputs import NoticeKind, SlotProbe

from ..core_support import T0
from .workload_support import NODE_ID, decide, finish_of, kinds, probe, slot, work

SPEC = WorkloadSpec(run="python3 train.py", stop_grace=25.0)


def noticed(*states: str, ago: float = 3.0, only: int | None = None) -> SlotProbe:
    """A probe whose workers (or worker `only`) saw the notice `ago` seconds before now."""
    p = probe(*states)
    at = T0 - timedelta(seconds=ago)
    return replace(
        p,
        workers=tuple(
            replace(w, notice_at=at) if only is None or w.worker == only else w for w in p.workers
        ),
    )


def test_a_workload_checkpointing_within_its_grace_is_left_alone() -> None:
    p = decide(work(spec=SPEC, probe_=noticed("run", "run", "exit0", "run", ago=3)))
    assert p.actions == []


@pytest.mark.parametrize(
    "states", [("exit0",) * 4, ("exit143", "exit0", "died", "exit1"), ("exit0", "exit0", "exit0")]
)
def test_stopped_everywhere_after_a_notice_is_a_preemption_not_a_failure(
    states: tuple[str, ...],
) -> None:
    p = decide(work(spec=SPEC, probe_=noticed(*states, only=0), slot_=slot(failures=2)))
    finish = finish_of(p)
    assert finish is not None
    assert finish.outcome is AttemptOutcome.PREEMPTED
    assert finish.detail.startswith("preemption notice; every worker stopped within 3s")
    (lost,) = [a for a in p.actions if isinstance(a, Transition)]
    assert (lost.incarnation_id, lost.expected, lost.new) == (
        NODE_ID,
        NodePhase.READY,
        NodePhase.DEAD,
    )
    assert lost.end_reason == "preempted"
    assert lost.slot_update is not None
    assert lost.slot_update.add_preemptions == 1
    assert lost.slot_update.create_failures == 0
    (delete,) = [a for a in p.actions if isinstance(a, DeleteNode)]
    assert (delete.incarnation_id, delete.expected) == (NODE_ID, NodePhase.DEAD)
    assert kinds(p) == ["finish", "transition", "delete"]  # no stop, no launch: it is going
    # The notice the probe read goes with the attempt's end, for its event when the notice
    # watch did not record one (a run stopped before the watch's answer came back).
    (heard,) = finish.notices
    assert (heard.incarnation_id, heard.at, heard.kind) == (
        NODE_ID,
        T0 - timedelta(seconds=3),
        None,
    )


def test_the_earliest_worker_notice_is_the_nodes_and_a_host_maintenance_one_says_so() -> None:
    p = noticed("exit0", "exit0", "exit0", "exit0", ago=2)
    first = replace(
        p.workers[2], notice_at=T0 - timedelta(seconds=5), notice_kind=NoticeKind.MAINTENANCE
    )
    p = replace(p, workers=(*p.workers[:2], first, p.workers[3]))
    finish = finish_of(decide(work(spec=SPEC, probe_=p)))
    assert finish is not None
    (heard,) = finish.notices
    assert (heard.at, heard.kind) == (T0 - timedelta(seconds=5), "maintenance")


def test_past_the_grace_the_attempt_is_preempted_whatever_still_runs() -> None:
    p = decide(work(spec=SPEC, probe_=noticed("run", "run", "exit0", "run", ago=26)))
    finish = finish_of(p)
    assert finish is not None
    assert finish.outcome is AttemptOutcome.PREEMPTED
    assert "still running after 26s (stop_grace)" in finish.detail
    assert kinds(p) == ["finish", "transition", "delete"]


def test_without_a_notice_the_same_exits_are_a_failure() -> None:
    p = decide(work(spec=SPEC, probe_=probe("exit143", "exit0", "exit0", "exit0")))
    finish = finish_of(p)
    assert finish is not None
    assert finish.outcome is AttemptOutcome.FAILED
    assert finish.notices == ()
    assert not any(isinstance(a, Transition) for a in p.actions)
