"""The workload runner: probes the workers of a slice, and hands workload actions to its executor.

Where it sits: the daemon's tick never calls it directly. The slots' background jobs
(runtime/workload/jobs.py) call `probe_slot(job)` (the launcher probes each worker of one slot, jobs
from `probe_jobs(snapshot)`) and `execute_chain(actions)` (one slot's workload actions, in
order), and hand the probes, tracked (`track`), to the next `plan_tick`; node replacements are
DeleteNode, the executor's business (`split`). `probe(snapshot)` and `execute_all(actions)`
are the same for every slot at once, awaited: for tools and tests that tick by hand.

It decides nothing (core/workload/planner.py does). The actions are carried out by its
`WorkloadExecutor` (runtime/workload/executor.py: launch, stop, cleanup, finish), which follows
the contract in core/workload/actions.py; what it finds out that the planner must know (a TPU
still held or a worker not reached by a cleanup, which of the workload's secret variables the
daemon's environment has: names only) reaches the planner through the next probe, whose
launch rules are core/workload/launch_gate.py. Every remote step, probe or action, goes
through its `Launcher` (the port, tpucared/ports/launcher.py): the daemon's is the SSH
launcher (tpucared/launch/, made by `from_config` through launchers.py), a test may give
another.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import structlog

from tpucared.config import Config
from tpucared.core.model.records import (
    IncarnationRecord,
    NodePhase,
    WorkerRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import FleetSpec, WorkloadSpec
from tpucared.core.vocab.actions import Action
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.snapshot import SlotKey
from tpucared.core.workload.actions import WORKLOAD_ACTIONS
from tpucared.core.workload.gang import probe_target
from tpucared.core.workload.inputs import SlotProbe, TickSnapshot, Unclean, WorkerProbe, track
from tpucared.core.workload.launch_gate import secrets_present
from tpucared.ports.launcher import (
    Launcher,
    NoticeResult,
    NoticeWait,
    Place,
    ProbeResult,
    Reply,
    RunState,
    WorkerLost,
)
from tpucared.runtime.workload.executor import WorkloadExecutor, chains_by_slot, files_missing
from tpucared.runtime.workload.hosts import HostKeyFetcher
from tpucared.runtime.workload.launchers import ssh_launcher_for
from tpucared.runtime.workload.maintenance import Starter
from tpucared.runtime.workload.probe_jobs import Answer, ProbeJob, numbered
from tpucared.store import Store

# chains_by_slot lives in executor.py; importable from here as before (runtime/workload/jobs.py).
__all__ = ["ProbeJob", "WorkloadRunner", "chains_by_slot"]

log = structlog.get_logger(__name__)


class WorkloadRunner:
    def __init__(
        self,
        store: Store,
        specs: Iterable[FleetSpec],
        launcher: Launcher,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._store = store
        specs = list(specs)
        self._workloads: dict[str, WorkloadSpec] = {
            s.name: s.workload for s in specs if s.workload is not None
        }
        self._slice_counts = {s.name: s.slices for s in specs if s.multislice}
        self._environ = os.environ if environ is None else environ
        self._clock = clock or (lambda: datetime.now(UTC))
        self._launcher = launcher
        launcher.on_lost = self._connection_lost
        # Told when a worker ends its connection by the worker's doing (jobs.py).
        self.on_connection_lost: Callable[[WorkerLost], None] | None = None
        self._last: dict[SlotKey, SlotProbe] = {}  # each slot's previous probe (for `track`)
        self._executor = WorkloadExecutor(
            store, self._workloads, launcher, self._environ, self._slice_counts
        )

    @classmethod
    def from_config(
        cls,
        config: Config,
        store: Store,
        *,
        fetch_host_keys: HostKeyFetcher | None = None,
        clock: Callable[[], datetime] | None = None,
        launcher: Launcher | None = None,
    ) -> WorkloadRunner:
        """A runner for the config's fleets with `launcher`, by default the SSH one with the
        daemon's SSH key (made if missing). Blocking (reads the key file): call it at
        start-up."""
        if launcher is None:
            launcher = ssh_launcher_for(config, store, fetch_host_keys=fetch_host_keys)
        return cls(store, config.fleets, launcher, clock=clock)

    def start_maintenance_with(self, starter: Starter) -> None:
        """How a fleet's `on_maintenance = now` asks the node's cloud (the daemon's clouds)."""
        self._executor.maintenance.starter = starter

    async def close(self) -> None:
        await self._launcher.close()

    @property
    def store(self) -> Store:
        return self._store

    def _connection_lost(self, lost: WorkerLost) -> None:
        if self.on_connection_lost is not None:
            self.on_connection_lost(lost)

    async def __aenter__(self) -> WorkloadRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @staticmethod
    def handles(action: Action) -> bool:
        return isinstance(action, WORKLOAD_ACTIONS)

    @classmethod
    def split(cls, plan: Plan) -> tuple[Plan, tuple[Action, ...]]:
        """The plan for the daemon's executor (node actions, notices, and the node
        replacements the workload planner asked for) and the actions for `execute_all`."""
        mine = tuple(a for a in plan.actions if cls.handles(a))
        rest = tuple(a for a in plan.actions if not cls.handles(a))
        return replace(plan, actions=rest), mine

    # -----------------------------------------------------------------------------------------
    # Probe

    async def probe(
        self, snapshot: TickSnapshot, now: datetime | None = None
    ) -> dict[SlotKey, SlotProbe]:
        """Probe every READY incarnation of a fleet with a workload, all workers in one
        fan-out, and track each answer against the previous one (`track`): the run of the
        slot's newest attempt on it (or, for an idle slot, a run that does not exist, which
        still tells whether each worker answers). The all-at-once form, for tools and tests
        that tick by hand; the daemon probes each slot in the background (jobs.py)."""
        now = now or self._clock()
        jobs = self.probe_jobs(snapshot)
        parts = [(job, inc, workers) for job in jobs for inc, workers in job.parts]
        places = await asyncio.gather(*(self._launcher.locate(i, w) for _, i, w in parts))
        runs = [
            (place, job.run)
            for (job, _, _), place in zip(parts, places, strict=True)
            if isinstance(place, Place)
        ]
        replies = iter(await self._launcher.probe(runs, only=True))
        answered: dict[SlotKey, list[Answer]] = {}
        for (job, _, _), place in zip(parts, places, strict=True):
            answers = None if isinstance(place, str) else next(replies)
            answered.setdefault(job.key, []).append((place, answers))
        probes: dict[SlotKey, SlotProbe] = {}
        for job in jobs:
            fresh = self._slot_probe(job, answered[job.key], now)
            probes[job.key] = self.track(fresh)
        self.forget({inc.id for inc in snapshot.nodes.values()})
        return probes

    def probe_jobs(self, snapshot: TickSnapshot) -> list[ProbeJob]:
        """What to probe: every slot of a fleet with a workload whose node (every slice of a
        multislice slot) is READY with workers recorded, at the run of the slot's newest
        attempt if it is on that node (the gang's stand-in: core/workload/gang.py)."""
        by_slot: dict[SlotKey, list[IncarnationRecord]] = {}
        for inc in snapshot.nodes.values():
            if inc.fleet in self._workloads:
                by_slot.setdefault((inc.fleet, inc.slot), []).append(inc)
        jobs: list[ProbeJob] = []
        for key, incs in sorted(by_slot.items()):
            slot = snapshot.slots.get(key)
            if slot is None:
                continue
            workers = {i.id: tuple(snapshot.workers.get(i.id, ())) for i in incs}
            job = self._job(key, incs, workers, snapshot.last_attempts.get(key), slot.run_id)
            if job is not None:
                jobs.append(job)
        return jobs

    def _job(
        self,
        key: SlotKey,
        incs: Sequence[IncarnationRecord],
        workers: Mapping[int, tuple[WorkerRecord, ...]],
        last: WorkloadAttemptRecord | None,
        run_id: str,
    ) -> ProbeJob | None:
        """The slot's probe job when it is whole with workers recorded on every slice, at
        the node core/workload/gang.py `probe_target` names (the gang's stand-in for several
        slices)."""
        spec = self._workloads.get(key[0])
        expected = self._slice_counts.get(key[0], 1)
        recorded = {i for i, w in workers.items() if w}
        target = probe_target(f"{key[0]}-{key[1]}", incs, expected, recorded, last)
        if spec is None or target is None:
            return None
        parts = tuple((i, workers[i.id]) for i in target.slices)
        return ProbeJob(key, target.node, target.attempt, spec, numbered(parts), run_id, parts)

    async def probe_job(self, incarnation_id: int) -> ProbeJob | None:
        """The probe of one incarnation's slot as the store has it now (None unless it is
        READY with workers, every slice of it, in a fleet with a workload): for a node that
        became READY, or a slot whose workload actions just ran, after the snapshot of the
        tick was read."""
        async with self._store.read() as r:
            inc = await r.incarnation(incarnation_id)
            if inc is None or inc.phase is not NodePhase.READY:
                return None
            incs = [inc]
            if self._slice_counts.get(inc.fleet, 1) > 1:
                incs = await r.incarnations(inc.fleet, inc.slot, live_only=True)
            slot = await r.slot(inc.fleet, inc.slot)
            workers = await r.workers([i.id for i in incs])
            newest = await r.workload_attempts(inc.fleet, inc.slot, limit=1)
        if slot is None:
            return None
        last = newest[0] if newest else None
        return self._job((inc.fleet, inc.slot), incs, workers, last, slot.run_id)

    async def probe_slot(self, job: ProbeJob, *, patient: bool = False) -> SlotProbe:
        """Probe one slot's workers (one probe per slice); untracked, stamped when the answers
        are in (so a timer that starts at this probe never starts early). `patient`: the
        node's first probe (a fresh node's workers may not answer yet: asked again a while)."""

        async def one(inc: IncarnationRecord, workers: Sequence[WorkerRecord]) -> Answer:
            place = await self._launcher.locate(inc, workers)
            if isinstance(place, str):
                return place, None
            (answers,) = await self._launcher.probe([(place, job.run)], patient=patient,
                                                    quiet=True)  # fmt: skip
            return place, answers

        answered = await asyncio.gather(*(one(i, w) for i, w in job.parts))
        return self._slot_probe(job, list(answered), self._clock())

    def workload_of(self, fleet: str) -> WorkloadSpec | None:
        return self._workloads.get(fleet)

    def previous(self, key: SlotKey) -> SlotProbe | None:
        """The slot's previous probe, as tracked."""
        return self._last.get(key)

    def track(self, fresh: SlotProbe) -> SlotProbe:
        """`fresh` tracked against the slot's previous probe (`workload_inputs.track`), which
        it then replaces."""
        key = (fresh.fleet, fresh.slot)
        tracked = track(self._last.get(key), fresh)
        self._last[key] = tracked
        return tracked

    def forget(self, live: set[int]) -> None:
        """Drop what is remembered about incarnations that are not live any more."""
        self._executor.forget(live)
        self._last = {k: p for k, p in self._last.items() if p.incarnation_id in live}

    async def prune_connections(self, live: set[int]) -> None:
        """Let the launcher go of what it holds for incarnations that are not live."""
        await self._launcher.forget(live)

    async def wait_notice(
        self, job: ProbeJob, what: NoticeWait, seconds: float, *, part: int = 0
    ) -> NoticeResult | str:
        """One wait on worker 0 of the slot (of its slice `part`) for its run's preemption
        notice (`what` NOTICE) or for the run to stop (STOPPED), at most `seconds`; or
        why it could not be asked (the runtime's notices.py asks again)."""
        place = await self._launcher.locate(*job.parts[part])
        if isinstance(place, str):
            return place
        return await self._launcher.wait_notice(place, job.run, what, seconds)

    async def signal_slices(self, job: ProbeJob, parts: Sequence[int], signal: str) -> int:
        """Send the run on every worker of these slices `signal` (a notice heard on another
        slice of the job); how many runs got it."""

        async def one(inc: IncarnationRecord, workers: Sequence[WorkerRecord]) -> int:
            place = await self._launcher.locate(inc, workers)
            if isinstance(place, str):
                return 0
            return await self._launcher.signal(place, job.run, signal)

        counts = await asyncio.gather(*(one(*job.parts[i]) for i in parts))
        return sum(counts)

    def _slot_probe(self, job: ProbeJob, answered: Sequence[Answer], now: datetime) -> SlotProbe:
        """One SlotProbe from each slice's answers (`job.parts` order), workers numbered
        slice by slice as the gang's (core/workload/gang.py)."""
        workers: list[WorkerProbe] = []
        busy: list[int] = []
        unhealthy: list[int] = []
        bad_hosts: set[datetime] = set()
        unclean: list[tuple[int, str]] = []
        cleaned: int | None = None  # the attempt the last unclean cleanup was of
        offset = 0
        for (inc, recorded), (found, answers) in zip(job.parts, answered, strict=True):
            if isinstance(found, str) or answers is None:
                # No usable address: every worker is unreachable.
                why = found if isinstance(found, str) else "no targets"
                mine = [WorkerProbe.unreachable(w.index, why) for w in recorded]
            else:
                mine = [_worker_probe(r) for r in answers]
            workers += [replace(w, worker=w.worker + offset) for w in mine]
            busy += [offset + w for w in self._executor.busy.get(inc.id, ())]
            unhealthy += [offset + w for w in self._executor.unhealthy.get(inc.id, ())]
            bad_hosts.update(self._executor.bad_hosts.get(inc.id, ()))
            if inc.id in self._executor.unclean:
                cleaned, left = self._executor.unclean[inc.id]
                unclean += [(offset + w, why) for w, why in left]
            offset += len(recorded)
        return SlotProbe(
            fleet=job.key[0],
            slot=job.key[1],
            incarnation_id=job.inc.id,
            attempt=job.attempt,
            observed_at=now,
            workers=tuple(workers),
            busy=tuple(busy),
            blocked=files_missing(job.spec),
            secrets_present=secrets_present(job.spec, self._environ.keys()),
            unclean=Unclean(cleaned, tuple(unclean)) if cleaned is not None else None,
            unhealthy=tuple(unhealthy),
            bad_hosts=tuple(sorted(bad_hosts)),
        )

    # -----------------------------------------------------------------------------------------
    # Execute

    async def execute_all(self, actions: Sequence[Action], *, now: datetime | None = None) -> None:
        """Carry out workload actions: each slot's in order, different slots concurrently
        (a fleet-wide relaunch is bounded by the pool's SSH concurrency, not done serially)."""
        for a in actions:
            if not self.handles(a):
                raise TypeError(f"not a workload action: {a.kind}")
        chains = chains_by_slot(actions)
        at = now or self._clock()

        async with asyncio.TaskGroup() as group:
            for chain in chains.values():
                group.create_task(self.execute_chain(chain, now=at))

    async def execute_chain(self, chain: Sequence[Action], *, now: datetime | None = None) -> None:
        """One slot's workload actions, in plan order (a launch after the finish it follows)."""
        for a in chain:
            await self.execute(a, now=now)

    async def execute(self, action: Action, *, now: datetime | None = None) -> None:
        """One workload action, carried out by the executor (runtime/workload/executor.py)."""
        await self._executor.execute(action, now or self._clock())


def _worker_probe(r: Reply[ProbeResult]) -> WorkerProbe:
    """One worker's probe answer; anything but a well-formed answer is 'unreachable'."""
    p = r.value
    if p is None:
        return WorkerProbe.unreachable(r.worker, r.why or "no answer")
    if p.state is RunState.RUNNING:
        probe = WorkerProbe.running(r.worker, p.log_bytes)
    elif p.state is RunState.EXITED:
        assert p.exit_code is not None
        probe = WorkerProbe.exited(r.worker, p.exit_code, p.log_bytes)
    else:
        probe = WorkerProbe.gone(r.worker, p.reason or "no-run")
    if p.progress is not None:
        probe = replace(probe, progress=p.progress)
    if p.notice_at is None:
        return probe
    at = datetime.fromtimestamp(p.notice_at, UTC)
    return replace(probe, notice_at=at, notice_kind=p.notice_kind)
