"""Workload SSH work off the tick: one background job per slot, a probe or a chain of actions.

Where it sits, in the daemon's tick (reconciler.py), which never awaits SSH:

    probes = jobs.collect(snapshot)        # probes that ended since the last tick, still valid
    plan = plan_tick(specs, observations, snapshot, probes, now, policy, owner, ...)
    ... the executor runs the node actions (their cloud calls in the background) ...
    jobs.dispatch(snapshot, plan, workload_actions)   # start chains and due probes, cancel

This module only starts, feeds and cancels the jobs; the rules it follows (which probe answers
are stale, which slots are due a probe, which of a chain's actions to drop, what is news) are
pure and live in core/workload/probes.py.

A slot has at most one job at a time: a probe of its READY node's workers, or the chain of
its workload actions of one plan, in order (runner.execute_chain). While a slot has a job,
its workload actions are not started (the job's end wakes the loop, and the next plan
decides again) and it is not probed. A chain that did SSH on a node is followed at once by
a probe of that node (the planner needs one to go on, and it shows what the chain did). A
probe wakes the loop (wakeup.py) when its answer is news (a worker's state changed, or the
slot's first answer on its node), urgently when a launch may follow (nothing runs there);
an unchanged answer waits for the next tick, which comes at the latest one poll later. A
chain of records only (finish, done) wakes nobody: nothing waits on it, unless a tick put
off the slot's actions meanwhile, which any job's end then wakes the loop for.

Which probes reach the planner. A probe is fed to exactly one plan: the first after it
ended, and only while it is still valid: the slot's live incarnation in the snapshot is the
one probed, still READY, the attempt probed is still the slot's newest on it, and no chain
of the slot started since the probe did (an epoch per slot, bumped when a chain starts and
when it ends). So a probe taken before a launch can never read as "that launch did not
start" and cause a second one. A slot without a fresh probe gets no launch, and its running
attempt is left alone (core/workload/planner.py: "no probe of this attempt this tick: keep
watching"), except for what needs no probe (its node died: the attempt ends as preempted).

When a slot is probed: a node this plan finds READY, in the same tick (the snapshot predates
the transition, so the probe reads its node from the store). Otherwise when the slot has no
job, its node is READY with workers recorded and this plan does not take the node away, and
either it has no probe of this node since its last chain, or it has no running attempt (the planner
can only launch with a fresh probe, and idle slots are few), or its last probe started at
least (about) one probe interval ago (the poll interval, or longer past `ssh.probe_rate` worker
probes a second: core/workload/probes.py `probe_interval`). The first probe of a node retries
a refused or timed-out connection for a while (a fresh node's sshd may not be up yet); the
slot has nothing else to do meanwhile, and the tick does not wait for it. At most
`max_probes` probes run at once (the rest queue in slot order), so 10,000 slices do not make
40,000 tasks at one tick; the SSH commands themselves are bounded by the pool's semaphore.

A slot's node replacement never races its launch: chains start after the plan's node
actions are recorded (a launch re-reads its node and starts nothing unless it is READY,
and `start_attempt` refuses a node that is not), a chain's launches and stops on a node
this plan deletes or takes out of READY are dropped, and a job on a node that this plan
takes away (or that is gone from the snapshot) is cancelled: its SSH would only time out.
Cancelling is safe at any point: every write is one transaction, intent comes before
acting, and a launch cut short is a recorded attempt that the planner ends or resumes.

A preemption notice is heard at once: `notices` (notices.py) keeps one waiting command per
slice with a running attempt, and asks for a probe of the slot (`probe_soon`, due or not)
when the notice comes and when the workload has stopped after it.

A pooled connection that a worker ends (its VM shutting down: preempted, terminated) wakes
the loop too: the next list then shows the node dead, without waiting for the poll. Only a
hint: if the API still says READY, nothing happens, and the poll remains the guarantee.

A job that fails with an exception none of this expects is contained to its slot
(failures.py): logged once, recorded as a `workload.job_failed` event (`tpucared status`
shows it until the streak ends), and the slot starts no job (neither probe nor chain) until
its backoff (core/workload/job_failures.py) has passed; the first tick after that plans and
starts it again. The daemon and the other slots' jobs go on. Only the cleanup of pooled
connections is not a slot's: its failure is logged and tried again at the next change.

Shutdown (`drain`): queued and running probes are cancelled at once (they only read);
chains get the drain deadline to finish and are cancelled after it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from tpucared.core.model.records import NodePhase
from tpucared.core.vocab.actions import Action
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.snapshot import SlotKey
from tpucared.core.workload.gang import by_slot, slot_node
from tpucared.core.workload.inputs import SlotProbe, TickSnapshot
from tpucared.core.workload.probes import (
    Probed,
    became_ready,
    first_probe,
    going_away,
    is_idle,
    is_news,
    is_reachable,
    keep_chain,
    leaving,
    node_of,
    probe_due,
    probe_interval,
    stale_probe,
)
from tpucared.ports.launcher import WorkerLost
from tpucared.runtime.clock import Clock
from tpucared.runtime.tasks import TaskSet
from tpucared.runtime.wakeup import Wakeup
from tpucared.runtime.workload.failures import SlotFailures
from tpucared.runtime.workload.notices import NoticeWatches
from tpucared.runtime.workload.progress import ProgressRecords
from tpucared.runtime.workload.runner import ProbeJob, WorkloadRunner, chains_by_slot

log = structlog.get_logger(__name__)

_NOT_SERVING = frozenset({NodePhase.DEAD, NodePhase.DELETING})

DEFAULT_MAX_PROBES = 64


@dataclass
class _Job:
    key: SlotKey
    kind: str  # "probe" | "chain"
    incarnation_id: int | None  # the node it does SSH on (None: a chain of records only)
    epoch: int  # the slot's epoch when it was made
    probe: ProbeJob | None = None  # None: read from the store when it starts
    task: asyncio.Task[None] | None = None  # None: a probe still queued
    cancelled: str | None = None  # why it was cancelled


@dataclass(frozen=True)
class _Result:
    probe: SlotProbe
    epoch: int  # the slot's epoch when the probe started


@dataclass
class Dispatch:
    """What one tick's `dispatch` did (for the tick's log line)."""

    chains: int = 0  # chains started
    deferred: int = 0  # slots whose workload actions wait for their job to end
    held: int = 0  # slots whose actions wait out the backoff after a failed job
    dropped: int = 0  # launches and stops dropped: their node is going away in this plan
    probes: int = 0  # probes started or queued
    cancelled: int = 0  # jobs cancelled: their node is going away
    in_flight: int = 0  # jobs after dispatch (queued probes included)
    fed: int = 0  # probes this tick's plan got
    stale: list[str] = field(default_factory=list)  # slots whose probe was dropped as stale

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {
            k: v for k, v in vars(self).items() if v and not isinstance(v, list)
        }
        if self.stale:
            out["stale"] = self.stale
        return out


class WorkloadJobs:
    def __init__(
        self,
        runner: WorkloadRunner,
        *,
        wakeup: Wakeup,
        clock: Clock,
        probe_interval: float,
        probe_rate: float = float("inf"),
        on_failure: Callable[[BaseException], None],
        max_probes: int = DEFAULT_MAX_PROBES,
    ) -> None:
        if max_probes < 1:
            raise ValueError("max_probes must be >= 1")
        self.runner = runner
        self._wakeup = wakeup
        self._clock = clock
        self._poll = probe_interval  # the shortest interval: probe_interval() may stretch it
        self.probe_rate = probe_rate
        self.interval = probe_interval  # the interval in force (at the last dispatch)
        self._max_probes = max_probes
        self._tasks = TaskSet(on_failure, what="workload jobs")
        self._jobs: dict[SlotKey, _Job] = {}
        self._queue: deque[SlotKey] = deque()  # probes waiting for one of `max_probes`
        self._probing = 0  # probes running
        self._epochs: dict[SlotKey, int] = {}
        self._results: dict[SlotKey, _Result] = {}  # ended since the last `collect`
        self._probed: dict[SlotKey, Probed] = {}  # each slot's newest probe
        self._stopping = False
        self._pruned: set[int] = set()  # the live incarnations at the last prune
        # The last dispatch's leaving nodes and snapshot; `_going` (nodes whose connections
        # going is no news) is worked out from them at a loss, not on every tick.
        self._seen_last: tuple[set[int], TickSnapshot] | None = None
        self._not_serving: set[int] | None = None
        self._deferred: set[SlotKey] = set()  # slots whose actions wait for their job to end
        self.failures = SlotFailures(runner.store, clock)  # slots whose last job failed
        # Slots to probe at the next dispatch, due or not: their preemption notice (notices.py).
        self._urgent: set[SlotKey] = set()
        self.notices = NoticeWatches(runner, runner.store, clock, self.probe_soon)
        self.progress = ProgressRecords(runner.store)
        self.last: Dispatch | None = None
        runner.on_connection_lost = self._connection_lost

    def __len__(self) -> int:
        return len(self._jobs)

    async def restore(self) -> None:
        """At start: the failing streaks the previous daemon left (failures.py)."""
        await self.failures.restore()

    def probe_soon(self, key: SlotKey, why: str) -> None:
        """Probe the slot at the next tick, which this wakes at once."""
        self._urgent.add(key)
        self._wakeup.set(f"{why} on {key[0]}/{key[1]}", urgent=True)

    def busy(self, key: SlotKey) -> str | None:
        """The kind of the slot's job in flight ("probe" or "chain"), or None."""
        job = self._jobs.get(key)
        return job.kind if job is not None else None

    # -----------------------------------------------------------------------------------------
    # The tick's side

    def collect(self, snapshot: TickSnapshot) -> dict[SlotKey, SlotProbe]:
        """The probes that ended since the last call and are still valid against `snapshot`
        (see the module docstring); each is handed out once."""
        fed: dict[SlotKey, SlotProbe] = {}
        stale: list[str] = []
        members = by_slot(snapshot.nodes.values()) if self._results else {}
        for key, result in sorted(self._results.items()):
            node = slot_node(members.get(key, []))
            epoch = self._epochs.get(key, 0)
            why = stale_probe(key, result.probe, result.epoch, epoch, snapshot, node)
            if why is None:
                fed[key] = result.probe
            else:
                stale.append(f"{key[0]}/{key[1]}: {why}")
        self._results.clear()
        self.last = Dispatch(fed=len(fed), stale=stale)
        if stale:
            log.debug("workload.stale_probes", slots=stale)
        return fed

    def dispatch(
        self, snapshot: TickSnapshot, plan: Plan, workload_actions: Sequence[Action]
    ) -> Dispatch:
        """After the plan's node actions are recorded: cancel the jobs on nodes going away,
        start each slot's chain of `workload_actions` (unless the slot has a job), then the
        probes that are due. Never awaits."""
        report = self.last or Dispatch()
        self.last = None
        if self._stopping:
            return report
        away = leaving(plan.actions)
        live = {inc.id for inc in snapshot.nodes.values()}
        self._seen_last, self._not_serving = (away, snapshot), None
        for job in list(self._jobs.values()):
            if job.incarnation_id is None or job.cancelled is not None:
                continue
            if going_away(job.incarnation_id, away, live):
                self._cancel(job, "its node is going away")
                report.cancelled += 1
        for key, chain in chains_by_slot(workload_actions).items():
            if key in self._jobs:
                report.deferred += 1
                self._deferred.add(key)
                continue
            if self.failures.held_back(key):
                report.held += 1  # a later tick plans them again, after the backoff
                continue
            kept = keep_chain(chain, away)
            report.dropped += len(chain) - len(kept)
            if kept:
                self._start_chain(key, kept)
                report.chains += 1
        report.probes = self._probe_new_nodes(snapshot, plan)
        probe_jobs = self.runner.probe_jobs(snapshot)  # once a tick: O(slots)
        report.probes += self._schedule_probes(snapshot, probe_jobs, away)
        self.notices.sync(snapshot, probe_jobs)
        report.in_flight = len(self._jobs)
        self.runner.forget(live)
        if live != self._pruned:
            # Connections to workers of nodes that are gone: closed now, not when evicted.
            self._pruned = live
            self._tasks.spawn(self._prune(live), name="prune connections")
        return report

    def _probe_new_nodes(self, snapshot: TickSnapshot, plan: Plan) -> int:
        """Probe the nodes this plan found READY now, not at the next tick: their slots wait
        for nothing else to launch (the snapshot predates the transition: read the store)."""
        keys = {inc.id: key[:2] for key, inc in snapshot.nodes.items()}
        started = 0
        for incarnation_id in became_ready(plan.actions):
            key = keys.get(incarnation_id)
            if key is None or key in self._jobs or self.failures.held_back(key):
                continue
            if self.runner.workload_of(key[0]) is None:
                continue
            self._start_probe(key, incarnation_id, None)
            started += 1
        return started

    def _schedule_probes(
        self, snapshot: TickSnapshot, jobs: Sequence[ProbeJob], away: set[int]
    ) -> int:
        """Probe the slots whose probe is due (core/workload/probes.py: `probe_due`)."""
        started = 0
        now = self._clock.monotonic()
        workers = sum(len(job.workers) for job in jobs)
        interval = probe_interval(self._poll, workers, self.probe_rate)
        if interval != self.interval:
            log.info("workload.probe_interval", seconds=round(interval, 1), workers=workers,
                     rate=self.probe_rate)  # fmt: skip
            self.interval = interval
        for job in jobs:
            key = job.key
            if key in self._jobs or job.inc.id in away or self.failures.held_back(key):
                continue
            due = key in self._urgent or probe_due(
                key,
                self._probed.get(key),
                incarnation_id=job.inc.id,
                attempt=job.attempt,
                slot_epoch=self._epochs.get(key, 0),
                snapshot=snapshot,
                now=now,
                interval=interval,
            )
            if due:
                self._urgent.discard(key)
                self._start_probe(key, job.inc.id, job)
                started += 1
        return started

    # -----------------------------------------------------------------------------------------
    # Jobs

    def _start_probe(self, key: SlotKey, incarnation_id: int, probe: ProbeJob | None) -> None:
        self._jobs[key] = _Job(key, "probe", incarnation_id, self._epochs.get(key, 0), probe)
        self._queue.append(key)
        self._pump()

    def _pump(self) -> None:
        """Start queued probes while fewer than `max_probes` run."""
        while self._queue and self._probing < self._max_probes:
            key = self._queue.popleft()
            job = self._jobs.get(key)
            if job is None or job.kind != "probe" or job.task is not None or job.cancelled:
                continue
            self._probing += 1
            job.task = self._tasks.spawn(self._run_probe(job), name=f"probe {key[0]}/{key[1]}")

    def _start_chain(self, key: SlotKey, chain: list[Action]) -> None:
        nodes = {n for n in (node_of(a) for a in chain) if n is not None}
        epoch = self._epochs.get(key, 0) + 1
        self._epochs[key] = epoch  # probes started before this chain are stale from now on
        job = _Job(key, "chain", min(nodes) if nodes else None, epoch)
        self._jobs[key] = job
        kinds = ",".join(a.kind for a in chain)
        job.task = self._tasks.spawn(self._run_chain(job, chain), name=f"{kinds} {key[0]}/{key[1]}")

    async def _run_probe(self, job: _Job) -> None:
        key = job.key
        first = first_probe(self._probed.get(key), job.incarnation_id)
        started = self._clock.monotonic()
        news = urgent = False
        failure: Exception | None = None
        try:
            probe = job.probe
            if probe is None:
                assert job.incarnation_id is not None
                probe = await self.runner.probe_job(job.incarnation_id)
                if probe is None or probe.key != key:
                    news = True  # not READY any more (or no workers): the planner decides
                    return
            fresh = await self.runner.probe_slot(probe, patient=first)
            news = is_news(self.runner.previous(key), fresh)
            urgent = news and is_idle(fresh)  # the planner may launch on this answer
            tracked = self.runner.track(fresh)
            reachable = is_reachable(fresh)
            self._probed[key] = Probed(fresh.incarnation_id, job.epoch, started, reachable)
            self._results[key] = _Result(tracked, job.epoch)
            await self.progress.seen(fresh)  # the workload's progress file, on its attempt
        except Exception as exc:  # contained to this slot (failures.py), never the daemon's
            failure = exc
        finally:
            self._probing -= 1
            self._end(job)
            self._pump()
            if news and not self._stopping:
                self._wakeup.set(f"probe of {key[0]}/{key[1]}", urgent=urgent)
        # No await since `_end`: the slot is held back before a tick could start it again.
        await self._settle(key, "probe", failure)

    async def _run_chain(self, job: _Job, chain: list[Action]) -> None:
        key = job.key
        failure: Exception | None = None
        try:
            await self.runner.execute_chain(chain)
        except asyncio.CancelledError:
            log.info("workload.chain_cancelled", fleet=key[0], slot=key[1],
                     actions=[a.kind for a in chain], why=job.cancelled or "stopping")  # fmt: skip
            raise
        except Exception as exc:  # contained to this slot (failures.py), never the daemon's
            failure = exc
        finally:
            self._epochs[key] = self._epochs.get(key, 0) + 1  # what it did wants a new probe
            self._end(job)
        await self._settle(key, ",".join(a.kind for a in chain), failure)
        if self._stopping or failure is not None:
            return  # a failed chain's slot is held back: no probe until its backoff passed
        if job.incarnation_id is not None and key not in self._jobs:
            # See at once what the launch or stop did: the probe wakes the loop if it is news
            # (it is after a launch or a stop), and the planner needs it to go on anyway.
            self._start_probe(key, job.incarnation_id, None)

    async def _settle(self, key: SlotKey, what: str, failure: Exception | None) -> None:
        """A slot's job ended: a failure starts or extends its streak, a success ends one."""
        if failure is not None:
            await self.failures.failed(key, what, failure)
        elif key in self.failures:
            await self.failures.succeeded(key, what)

    async def _prune(self, live: set[int]) -> None:
        """Close the pooled connections of nodes that are gone; best effort (no slot's)."""
        try:
            await self.runner.prune_connections(live)
        except Exception as exc:
            self._pruned = set()  # try again at the next dispatch
            log.warning("workload.prune_failed", error=str(exc))

    def _end(self, job: _Job) -> None:
        if self._jobs.get(job.key) is job:
            del self._jobs[job.key]
            if self._stopping:
                return
            if job.cancelled is not None:
                # The slot is free: plan it now (e.g. end the attempt of its dead node).
                self._wakeup.set(f"workload job of {job.key[0]}/{job.key[1]} cancelled")
            elif job.key in self._deferred:
                self._wakeup.set(f"deferred workload actions of {job.key[0]}/{job.key[1]}")
            self._deferred.discard(job.key)

    def _cancel(self, job: _Job, why: str) -> None:
        job.cancelled = why
        if job.task is None:  # a queued probe: never started
            del self._jobs[job.key]
            return
        log.info("workload.job_cancelled", fleet=job.key[0], slot=job.key[1], kind=job.kind,
                 why=why)  # fmt: skip
        job.task.cancel()

    def _connection_lost(self, lost: WorkerLost) -> None:
        """A worker closed its pooled connection (its VM is shutting down: preempted,
        terminated, rebooting) or the network dropped it: plan now, do not wait for the
        poll. The list then shows what the API says; if the node still reads READY, nothing
        happens. A node already known to be going wakes nothing (`_going`)."""
        if self._stopping:
            return
        known = lost.incarnation_id
        news = not (known is not None and known in self._going())
        log.debug("workload.connection_lost", host=lost.host, worker=lost.worker,
                  incarnation=known, wakes=news)  # fmt: skip
        if news:
            self._wakeup.set("ssh connection lost")

    def _going(self) -> set[int]:
        """Incarnations the last plan took away, or DEAD / DELETING in its snapshot."""
        if self._not_serving is None:
            away, snapshot = self._seen_last or (set(), None)
            nodes = snapshot.nodes.values() if snapshot is not None else ()
            self._not_serving = away | {i.id for i in nodes if i.phase in _NOT_SERVING}
        return self._not_serving

    # -----------------------------------------------------------------------------------------
    # Shutdown

    async def drain(self, within: float) -> int:
        """At stop: cancel the probes, give chains `within` seconds, cancel the rest. Returns
        how many chains were cut short."""
        self._stopping = True
        self._queue.clear()
        await self.notices.close()
        for job in list(self._jobs.values()):
            if job.kind == "probe":
                if job.task is None:
                    del self._jobs[job.key]
                else:
                    job.cancelled = "stopping"
                    job.task.cancel()
        return await self._tasks.drain(self._clock, within)

    async def close(self) -> None:
        """Cancel everything at once (tests; `drain` is the daemon's way)."""
        self._stopping = True
        self._queue.clear()
        await self.notices.close()
        await self._tasks.cancel()
        self._jobs.clear()
