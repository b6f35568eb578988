"""Probe scheduling: which slots to probe when, which probe answers reach the planner, and which
chains of workload actions to keep or drop when a plan takes nodes away.

Where it sits in the flow: the runtime's `WorkloadJobs` (runtime/workload/jobs.py) runs a
slot's probes and chains of actions in the background, off the daemon's tick, and asks these
rules at each of its steps; it keeps the jobs themselves (tasks, queue, epochs, the clock) and
decides nothing:

    collect   (before the plan)   `stale_probe` for every probe that ended since the last
                                  tick: fed to the plan, or dropped and why
    dispatch  (after the plan's   `leaving`: the nodes this plan takes away; a job on one of
               node actions)      them, or on a node gone from the snapshot, is cancelled
                                  (`going_away`); `keep_chain`: a slot's chain without its
                                  launches and stops on such nodes; `became_ready`: nodes to
                                  probe at once; `probe_due`: which other slots to probe now
    a probe's end                 `is_news` (wake the loop), urgently when `is_idle` (a
                                  launch may follow); `first_probe` picks the retrying probe
                                  of a node whose sshd may not be up yet

Epochs: each slot has a counter that the runtime bumps when a chain of its workload actions
starts and when it ends, so a probe taken before or during a chain can be told from one taken
after it. Times here are the runtime's monotonic seconds, passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass
from typing import Final

from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.vocab.actions import Action, DeleteNode, Transition
from tpucared.core.vocab.snapshot import SlotKey
from tpucared.core.workload.actions import LaunchWorkload, StopWorkload
from tpucared.core.workload.inputs import SlotProbe, TickSnapshot, WorkerProbe, WorkerState

# A probe is due when its predecessor started this share of the probe interval ago: the
# next poll tick comes one interval after the previous tick *started*, a hair before the
# probe it started did.
DUE_SHARE: Final = 0.9


@dataclass(frozen=True)
class Probed:
    """A slot's newest probe, as far as scheduling the next one is concerned."""

    incarnation_id: int
    epoch: int  # the slot's epoch when the probe started
    started: float  # monotonic seconds
    reachable: bool  # some worker answered (the node's sshd is up)


# ---------------------------------------------------------------------------------------------
# What a plan does to the nodes jobs run on


def leaving(actions: Iterable[Action]) -> set[int]:
    """Incarnations these actions delete or take out of READY (what core/planning/tick.py's
    `nodes_outcome` tells the workload planner, from the actions alone: the runtime has no
    View when it dispatches)."""
    out: set[int] = set()
    for a in actions:
        if isinstance(a, DeleteNode) or (
            isinstance(a, Transition) and a.new is not NodePhase.READY
        ):
            out.add(a.incarnation_id)
    return out


def going_away(incarnation_id: int, leaving: Set[int], live: Set[int]) -> bool:
    """Whether a job doing SSH on this incarnation is to be cancelled: the plan takes the
    node away, or it is no longer live in the snapshot (its SSH would only time out)."""
    return incarnation_id in leaving or incarnation_id not in live


def node_of(a: Action) -> int | None:
    """The incarnation a workload action does SSH on (None: a record only)."""
    return a.incarnation_id if isinstance(a, LaunchWorkload | StopWorkload) else None


def keep_chain(chain: Sequence[Action], leaving: Set[int]) -> list[Action]:
    """A slot's chain of workload actions without its launches and stops on nodes this plan
    takes away (the records, e.g. FinishAttempt, are kept)."""
    return [a for a in chain if node_of(a) not in leaving]


def became_ready(actions: Iterable[Action]) -> list[int]:
    """Incarnations these actions move to READY (and do not take away again), in plan order:
    their slots wait for nothing but a probe to launch, so they are probed in the same tick."""
    actions = tuple(actions)
    gone = leaving(actions)
    return [
        a.incarnation_id
        for a in actions
        if isinstance(a, Transition) and a.new is NodePhase.READY and a.incarnation_id not in gone
    ]


# ---------------------------------------------------------------------------------------------
# Which slots to probe when


def probe_interval(poll: float, workers: int, rate: float) -> float:
    """Seconds between two probes of a slot that nothing hurries: the poll interval, or longer
    when probing every worker (`workers`, of every slot probed) once a poll would take more
    than `rate` worker probes a second (`ssh.probe_rate`). Past that size the interval grows
    with the fleet (workers / rate) and the probes' cost stays flat. A fresh node, a slot whose
    actions just ran and an idle slot are probed at once whatever this says (`probe_due`),
    and a notice, an exit seen by the notice watch or a lost connection still wake the loop."""
    if rate <= 0:
        raise ValueError(f"probe rate must be > 0, got {rate}")
    return max(poll, workers / rate)


def probe_due(
    key: SlotKey,
    last: Probed | None,
    *,
    incarnation_id: int,
    attempt: int | None,
    slot_epoch: int,
    snapshot: TickSnapshot,
    now: float,
    interval: float,
) -> bool:
    """Whether to probe the slot's READY node `incarnation_id` (looking at the run of
    `attempt`) now, given its newest probe `last`: at once for a node not probed yet, after
    the slot's workload actions ran, or while the slot waits to launch; otherwise about once
    per `interval`."""
    if last is None or last.incarnation_id != incarnation_id:
        return True  # a fresh node
    if last.epoch != slot_epoch:
        return True  # the slot's workload actions ran since: see what they did
    newest = snapshot.last_attempts.get(key)
    slot = snapshot.slots.get(key)
    idle = newest is None or newest.ended_at is not None or newest.number != attempt
    if idle and slot is not None and not slot.done:
        return True  # a launch waits for a fresh probe
    return now - last.started >= DUE_SHARE * interval


def first_probe(previous: Probed | None, incarnation_id: int | None) -> bool:
    """Whether a probe is the first to reach this node (none yet, another node, or no worker
    answered last time): it retries refused connections while the node's sshd comes up."""
    return previous is None or previous.incarnation_id != incarnation_id or not previous.reachable


# ---------------------------------------------------------------------------------------------
# Which probe answers count


def stale_probe(
    key: SlotKey,
    probe: SlotProbe,
    probe_epoch: int,
    slot_epoch: int,
    snapshot: TickSnapshot,
    node: IncarnationRecord | None,
) -> str | None:
    """Why a probe that ended (started in `probe_epoch`) may not be fed to the plan over
    `snapshot`, or None when it may: the slot's live incarnation is the one probed and still
    READY, no chain of the slot started since the probe did, and the attempt probed is still
    the newest on that node. So a probe taken before a launch never reads as "that launch did
    not start". `node`: the slot's live node now (core/workload/gang.py `slot_node`)."""
    inc = node
    if inc is None or inc.id != probe.incarnation_id:
        return "another node now"
    if inc.phase is not NodePhase.READY:
        return f"node {inc.phase.value}"
    if probe_epoch != slot_epoch:
        return "taken before the slot's last workload actions"
    last = snapshot.last_attempts.get(key)
    number = last.number if last is not None and last.incarnation_id == inc.id else None
    if number != probe.attempt:
        return f"probed attempt {probe.attempt}, newest is {number}"
    return None


def is_news(before: SlotProbe | None, fresh: SlotProbe) -> bool:
    """Whether the planner may decide something new from `fresh`: anything but the same
    answers (states, exit codes, why) from the same run as the previous probe."""
    if before is None:
        return True
    if _facts(before) != _facts(fresh):
        return True
    return _answers(before.workers) != _answers(fresh.workers)


def is_idle(probe: SlotProbe) -> bool:
    """Nothing runs on the probed node: the planner may launch (or relaunch) on this answer."""
    return probe.attempt is None or all(w.state is not WorkerState.RUNNING for w in probe.workers)


def is_reachable(probe: SlotProbe) -> bool:
    """Some worker answered: the node's sshd is up."""
    return any(w.state is not WorkerState.UNREACHABLE for w in probe.workers)


def _facts(p: SlotProbe) -> tuple[object, ...]:
    """What the probe says besides the workers' answers: its run, and the daemon's facts."""
    return (p.incarnation_id, p.attempt, p.busy, p.blocked, p.secrets_present, p.unclean,
            p.unhealthy, p.bad_hosts)  # fmt: skip


def _answers(workers: Iterable[WorkerProbe]) -> list[tuple[object, ...]]:
    return [(w.worker, w.state, w.exit_code, w.detail, w.notice_at) for w in workers]
