"""The workload runner: probes the workers of a slice, and hands workload actions to its executor.

Where it sits: the daemon's tick never calls it directly. The slots' background jobs
(runtime/workload/jobs.py) call `probe_slot(job)` (one SSH command per worker of one slot, jobs
from `probe_jobs(snapshot)`) and `execute_chain(actions)` (one slot's workload actions, in
order), and hand the probes, tracked (`track`), to the next `plan_tick`; node replacements are
DeleteNode, the executor's business (`split`). `probe(snapshot)` and `execute_all(actions)`
are the same for every slot at once, awaited: for tools and tests that tick by hand.

It decides nothing (core/workload/planner.py does). The actions are carried out by its
`WorkloadExecutor` (runtime/workload/executor.py: launch, stop, cleanup, finish), which follows
the contract in core/workload/actions.py; what it finds out that the planner must know (a TPU
still held after cleanup, a secret missing from the daemon's environment) reaches the planner
through the next probe. Every remote step, probe or action, goes through tpucared.ssh over one
long-lived `ConnectionPool` (idle connections capped, least recently used closed first); the
worker-side paths are in runtime/workload/layout.py, targets and host key pins in
runtime/workload/hosts.py.
"""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import asyncssh
import structlog

from tpucared.config import Config, SshConfig
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
from tpucared.core.workload.gang import Gang
from tpucared.core.workload.inputs import SlotProbe, TickSnapshot, WorkerProbe, track
from tpucared.runtime.workload import layout
from tpucared.runtime.workload.executor import (
    WorkloadExecutor,
    chains_by_slot,
    launch_blocked,
    targets_or_why,
    why_failed,
)
from tpucared.runtime.workload.hosts import HostKeyFetcher, WorkerHosts
from tpucared.runtime.workload.probe_jobs import Answer, ProbeJob, numbered
from tpucared.ssh import (
    DEFAULT_DEVICE_PATTERNS,
    DEFAULT_LIBTPU_LOCKFILE,
    DEFAULT_RETRY,
    NO_RETRY,
    ConnectionPool,
    NoticeResult,
    RetryPolicy,
    RunState,
    ScriptOutputError,
    Target,
    WorkerResult,
    ensure_client_key,
    notice_wait_script,
    parse_notice_wait,
    parse_probe,
    probe_script,
    run_on_all,
    sh_command,
    signal_script,
)
from tpucared.store import Store

# chains_by_slot lives in executor.py; importable from here as before (runtime/workload/jobs.py).
__all__ = ["ProbeJob", "RunnerOptions", "WorkloadRunner", "chains_by_slot"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RunnerOptions:
    # One short command per worker per tick, never retried (the next tick is the retry).
    probe_timeout: float = 20.0
    # Launch waits up to 60 s for a concurrent launch's lock; uploads carry the files.
    command_timeout: float = 120.0
    retry: RetryPolicy = DEFAULT_RETRY
    # Cleanup: how long the run's process group gets after TERM before KILL; what counts as
    # the TPU (device files and the libtpu lock file) on the workers.
    cleanup_grace: float = 5.0
    device_patterns: tuple[str, ...] = DEFAULT_DEVICE_PATTERNS
    lockfile: str = DEFAULT_LIBTPU_LOCKFILE
    # Pooled connections kept, least recently used idle ones closed first; None: `pool_size()`.
    max_idle_connections: int | None = None


# File descriptors kept for everything but pooled connections: the commands in flight beyond
# the pool (ssh.concurrency), the database, the HTTP server and API clients, the logs.
FD_RESERVE = 1024
MIN_POOL = 64


def pool_size(open_files_limit: int | None = None) -> int:
    """How many connections the pool keeps: one per worker probed, as far as the open files
    limit allows (the daemon raises its soft limit to the hard one at start). Every probe
    visits every worker in turn, so a pool smaller than the workers helps no probe at all
    (the least recently used connection is always the next one needed) and each pays a
    handshake (~4 ms of CPU) instead of a channel. A connection costs ~23 KiB of RSS
    (asyncssh 2.24): 4,000 workers ~90 MB; 40,000 (10,000 v4-32 slices) ~0.9 GB."""
    if open_files_limit is None:
        open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files_limit == resource.RLIM_INFINITY:
        open_files_limit = 1 << 20
    # Half of a small limit (1024: 512 pooled, as before the limit was raised).
    return max(MIN_POOL, open_files_limit - min(FD_RESERVE, open_files_limit // 2))


class WorkloadRunner:
    def __init__(
        self,
        store: Store,
        specs: Iterable[FleetSpec],
        ssh: SshConfig,
        key: asyncssh.SSHKey,
        *,
        fetch_host_keys: HostKeyFetcher | None = None,
        environ: Mapping[str, str] | None = None,
        options: RunnerOptions | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._store = store
        specs = list(specs)
        self._workloads: dict[str, WorkloadSpec] = {
            s.name: s.workload for s in specs if s.workload is not None
        }
        self._slice_counts = {s.name: s.slices for s in specs if s.multislice}
        self._environ = os.environ if environ is None else environ
        self._options = options or RunnerOptions()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._pool = ConnectionPool(
            key,
            concurrency=ssh.concurrency,
            max_connections=self._options.max_idle_connections or pool_size(),
            on_lost=self._connection_lost,
        )
        # Told when a pooled connection to a worker ends by the worker's doing (jobs.py).
        self.on_connection_lost: Callable[[Target], None] | None = None
        self._hosts = WorkerHosts(store, ssh, fetch_host_keys)
        self._last: dict[SlotKey, SlotProbe] = {}  # each slot's previous probe (for `track`)
        self._executor = WorkloadExecutor(
            store, self._workloads, self._hosts, self._pool, self._options, self._environ,
            self._slice_counts,
        )  # fmt: skip

    @classmethod
    def from_config(
        cls,
        config: Config,
        store: Store,
        *,
        fetch_host_keys: HostKeyFetcher | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> WorkloadRunner:
        """A runner for the config's fleets with the daemon's SSH key (made if missing).
        Blocking (reads the key file): call it at start-up."""
        key = ensure_client_key(config.ssh.key)
        return cls(store, config.fleets, config.ssh, key, fetch_host_keys=fetch_host_keys,
                   clock=clock)  # fmt: skip

    async def close(self) -> None:
        await self._pool.close()

    @property
    def store(self) -> Store:
        return self._store

    def _connection_lost(self, target: Target) -> None:
        if self.on_connection_lost is not None:
            self.on_connection_lost(target)

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
        targets = await asyncio.gather(*(targets_or_why(self._hosts, i, w) for _, i, w in parts))
        commands: dict[Target, str] = {}
        for (job, _, _), found in zip(parts, targets, strict=True):
            if isinstance(found, list):
                command = self._probe_command(job)
                commands.update({t: command for t in found})
        results = []
        if commands:
            results = await run_on_all(
                list(commands),
                lambda t: commands[t],
                pool=self._pool,
                retry=NO_RETRY,
                command_timeout=self._options.probe_timeout,
                label="probe",
            )
        by_target = dict(zip(commands, results, strict=True))
        answered: dict[SlotKey, list[Answer]] = {}
        for (job, _, _), found in zip(parts, targets, strict=True):
            answers = None if isinstance(found, str) else [by_target[t] for t in found]
            answered.setdefault(job.key, []).append((found, answers))
        probes: dict[SlotKey, SlotProbe] = {}
        for job in jobs:
            fresh = await self._slot_probe(job, answered[job.key], now)
            probes[job.key] = self.track(fresh)
        self.forget({inc.id for inc in snapshot.nodes.values()})
        await self._pool.prune(commands)
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
        """The slot's probe job when every slice is READY with workers recorded."""
        spec = self._workloads.get(key[0])
        expected = self._slice_counts.get(key[0], 1)
        ready = sorted((i for i in incs if i.phase is NodePhase.READY), key=lambda i: i.slice)
        if spec is None or len(ready) != expected or len(incs) != expected:
            return None
        if any(not workers.get(i.id) for i in ready):
            return None
        node = ready[0]
        if expected > 1:
            gang = Gang(f"{key[0]}-{key[1]}", expected, tuple(ready),
                        {i.id: i.phase for i in ready}, {})  # fmt: skip
            node = gang.stand_in() or node
        on_node = last is not None and last.incarnation_id == node.id
        number = last.number if last is not None and on_node else None
        parts = tuple((i, workers[i.id]) for i in ready)
        return ProbeJob(key, node, number, spec, numbered(parts), run_id, parts)

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

    async def probe_slot(self, job: ProbeJob, *, retry: RetryPolicy = NO_RETRY) -> SlotProbe:
        """Probe one slot's workers (one fan-out per slice); untracked, stamped when the
        answers are in (so a timer that starts at this probe never starts early). `retry`
        covers failures before the command starts (a fresh node's sshd that is not up yet)."""
        command = self._probe_command(job)

        async def one(inc: IncarnationRecord, workers: Sequence[WorkerRecord]) -> Answer:
            found = await targets_or_why(self._hosts, inc, workers)
            if isinstance(found, str):
                return found, None
            answers = await run_on_all(
                found,
                command,
                pool=self._pool,
                retry=retry,
                command_timeout=self._options.probe_timeout,
                label="probe",
                quiet=True,  # one line per slot per poll: at info only when a worker failed
            )
            return found, answers

        answered = await asyncio.gather(*(one(i, w) for i, w in job.parts))
        return await self._slot_probe(job, list(answered), self._clock())

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
        """Close idle pooled connections to workers of incarnations that are not live."""
        await self._pool.prune_incarnations({str(i) for i in live})

    async def wait_notice(
        self, job: ProbeJob, what: str, seconds: float, *, part: int = 0
    ) -> NoticeResult | str:
        """One wait on worker 0 of the slot (of its slice `part`) for its run's preemption
        notice (`what` = "notice") or for the run to stop ("stopped"), at most `seconds`; or
        why it could not be asked (the runtime's notices.py asks again)."""
        inc, workers = job.parts[part]
        found = await targets_or_why(self._hosts, inc, workers)
        if isinstance(found, str):
            return found
        run_dir = layout.attempt_dir(job.run_id, job.attempt)
        (result,) = await run_on_all(
            found[:1],
            sh_command(notice_wait_script(run_dir, what, seconds)),
            pool=self._pool,
            retry=NO_RETRY,
            command_timeout=seconds + 30,
            label="notice",
            quiet=True,
            waits=True,  # minutes long, one per running slice: must not hold the pool's bound
        )
        if not result.completed or result.exit_status != 0:
            return why_failed(result)
        try:
            return parse_notice_wait(result.stdout_tail)
        except ScriptOutputError as exc:
            return str(exc)

    async def signal_slices(self, job: ProbeJob, parts: Sequence[int], signal: str) -> int:
        """Send the run on every worker of these slices `signal` (a notice heard on another
        slice of the job); how many runs got it."""
        script = sh_command(signal_script(layout.attempt_dir(job.run_id, job.attempt), signal))

        async def one(inc: IncarnationRecord, workers: Sequence[WorkerRecord]) -> int:
            found = await targets_or_why(self._hosts, inc, workers)
            if isinstance(found, str):
                return 0
            done = await run_on_all(
                found,
                script,
                pool=self._pool,
                retry=self._options.retry,
                command_timeout=self._options.probe_timeout,
                label="signal",
            )
            return sum(1 for r in done if r.completed and "state=sent" in r.stdout_tail)

        counts = await asyncio.gather(*(one(*job.parts[i]) for i in parts))
        return sum(counts)

    def _probe_command(self, job: ProbeJob) -> str:
        return sh_command(probe_script(layout.attempt_dir(job.run_id, job.attempt)))

    async def _slot_probe(
        self, job: ProbeJob, answered: Sequence[Answer], now: datetime
    ) -> SlotProbe:
        """One SlotProbe from each slice's answers (`job.parts` order), workers numbered
        slice by slice as the gang's (core/workload/gang.py)."""
        workers: list[WorkerProbe] = []
        busy: list[int] = []
        offset = 0
        for (inc, recorded), (found, answers) in zip(job.parts, answered, strict=True):
            if isinstance(found, str) or answers is None:
                # No usable address: every worker is unreachable.
                why = found if isinstance(found, str) else "no targets"
                mine = [WorkerProbe.unreachable(w.index, why) for w in recorded]
            else:
                await self._hosts.remember(inc, found, answers)
                mine = [_worker_probe(r) for r in answers]
            workers += [replace(w, worker=w.worker + offset) for w in mine]
            busy += [offset + w for w in self._executor.busy.get(inc.id, ())]
            offset += len(recorded)
        return SlotProbe(
            fleet=job.key[0],
            slot=job.key[1],
            incarnation_id=job.inc.id,
            attempt=job.attempt,
            observed_at=now,
            workers=tuple(workers),
            busy=tuple(busy),
            blocked=launch_blocked(job.spec, self._environ),
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


def _worker_probe(r: WorkerResult) -> WorkerProbe:
    """One worker's probe answer; anything but a well-formed answer is 'unreachable'."""
    if not r.completed or r.exit_status != 0:
        return WorkerProbe.unreachable(r.worker, why_failed(r))
    try:
        p = parse_probe(r.stdout_tail)
    except ScriptOutputError as exc:
        return WorkerProbe.unreachable(r.worker, str(exc))
    if p.state is RunState.RUNNING:
        probe = WorkerProbe.running(r.worker, p.log_bytes)
    elif p.state is RunState.EXITED:
        assert p.exit_code is not None
        probe = WorkerProbe.exited(r.worker, p.exit_code, p.log_bytes)
    else:
        probe = WorkerProbe.gone(r.worker, p.reason or "no-run")
    if p.notice_at is None:
        return probe
    return replace(probe, notice_at=datetime.fromtimestamp(p.notice_at, UTC))
