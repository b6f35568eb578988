"""The workload runner: probes the workers of a slice, and carries out workload actions.

Where it sits: the daemon's tick never calls it directly. The slots' background jobs
(workload_jobs.py) call `probe_slot(job)` (one SSH command per worker of one slot, jobs from
`probe_jobs(snapshot)`) and `execute_chain(actions)` (one slot's workload actions, in order),
and hand the probes, tracked (`track`), to the next `plan_tick`; node replacements are
DeleteNode, the executor's business (`split`). `probe(snapshot)` and `execute_all(actions)`
are the same for every slot at once, awaited: for tools and tests that tick by hand.

It decides nothing (core/workload/planner.py does): `execute` follows the contract in
core/workload/actions.py, and what it finds out that the planner must know (a TPU still held
after cleanup, a secret missing from the daemon's environment) reaches the planner through
the next probe. Every remote step goes through tpucared.ssh over one long-lived
`ConnectionPool` (idle connections capped, least recently used closed first); the
worker-side paths are in runtime/workload/layout.py, targets and host key pins in
runtime/workload/hosts.py. Secret values are read from the daemon's environment
at launch, registered for log redaction, and reach the workers only as a 0600 file written
through SSH stdin: never the database, node metadata, logs, or a command line.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import asyncssh
import structlog

from tpucared.config import Config, SshConfig
from tpucared.core.model.records import IncarnationRecord, NodePhase, SlotRecord, WorkerRecord
from tpucared.core.model.specs import FleetSpec, WorkloadSpec
from tpucared.core.planning.actions import Action
from tpucared.core.planning.plan import Plan
from tpucared.core.planning.snapshot import SlotKey
from tpucared.core.workload.actions import (
    WORKLOAD_ACTIONS,
    FinishAttempt,
    LaunchWorkload,
    MarkSlotDone,
    StopWorkload,
)
from tpucared.core.workload.inputs import SlotProbe, TickSnapshot, WorkerProbe, track
from tpucared.logsetup import register_secret
from tpucared.runtime.workload import layout
from tpucared.runtime.workload.hosts import HostKeyFetcher, WorkerHosts
from tpucared.ssh import (
    DEFAULT_DEVICE_PATTERNS,
    DEFAULT_LIBTPU_LOCKFILE,
    DEFAULT_RETRY,
    NO_RETRY,
    CleanupState,
    ConnectionPool,
    FileUpload,
    LaunchState,
    RetryPolicy,
    RunState,
    ScriptOutputError,
    Target,
    WorkerResult,
    cleanup_script,
    ensure_client_key,
    launch_script,
    parse_cleanup,
    parse_launch,
    parse_probe,
    probe_script,
    run_on_all,
    secrets_file_contents,
    sh_command,
    upload,
    workload_environment,
)
from tpucared.store import NotFound, StaleWrite, Store

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
    # Pooled connections kept, least recently used idle ones closed first. One per worker
    # would be 40,000 for 10,000 v4-32 slices: ~23 KiB of client RSS each (measured with
    # asyncssh 2.24: ~0.9 GB) and one file descriptor each, against systemd's default soft
    # limit of 1024. 512 costs ~12 MB and leaves room for the commands in flight (ssh
    # concurrency), the database and the HTTP server; beyond it a probe pays a handshake.
    max_idle_connections: int = 512


@dataclass(frozen=True)
class ProbeJob:
    """One slot to probe: its READY incarnation and workers as the snapshot had them, and
    the attempt whose run to look at there (None: no attempt on this node yet)."""

    key: SlotKey
    inc: IncarnationRecord
    attempt: int | None
    spec: WorkloadSpec
    workers: tuple[WorkerRecord, ...]
    run_id: str


@dataclass(frozen=True)
class _Slice:
    """A slot's READY incarnation as stored when an action runs, with its SSH targets."""

    inc: IncarnationRecord
    slot: SlotRecord
    targets: list[Target]


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
        self._workloads: dict[str, WorkloadSpec] = {
            s.name: s.workload for s in specs if s.workload is not None
        }
        self._environ = os.environ if environ is None else environ
        self._options = options or RunnerOptions()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._pool = ConnectionPool(
            key,
            concurrency=ssh.concurrency,
            max_connections=self._options.max_idle_connections,
            on_lost=self._connection_lost,
        )
        # Told when a pooled connection to a worker ends by the worker's doing (workload_jobs).
        self.on_connection_lost: Callable[[Target], None] | None = None
        self._hosts = WorkerHosts(store, ssh, fetch_host_keys)
        self._last: dict[SlotKey, SlotProbe] = {}  # each slot's previous probe (for `track`)
        self._busy: dict[int, tuple[int, ...]] = {}  # incarnation -> workers left busy

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
        that tick by hand; the daemon probes each slot in the background (workload_jobs.py)."""
        now = now or self._clock()
        jobs = self.probe_jobs(snapshot)
        targets = await asyncio.gather(*(self._targets(j.inc, j.workers) for j in jobs))
        commands: dict[Target, str] = {}
        for job, found in zip(jobs, targets, strict=True):
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
        probes: dict[SlotKey, SlotProbe] = {}
        for job, found in zip(jobs, targets, strict=True):
            answers = None if isinstance(found, str) else [by_target[t] for t in found]
            fresh = await self._slot_probe(job, found, answers, now)
            probes[job.key] = self.track(fresh)
        self.forget({inc.id for inc in snapshot.nodes.values()})
        await self._pool.prune(commands)
        return probes

    def probe_jobs(self, snapshot: TickSnapshot) -> list[ProbeJob]:
        """What to probe: every slot of a fleet with a workload whose node is READY with
        workers recorded, at the run of the slot's newest attempt if it is on that node."""
        jobs: list[ProbeJob] = []
        for key, inc in sorted(snapshot.nodes.items()):
            spec = self._workloads.get(inc.fleet)
            if spec is None or key not in snapshot.slots or inc.phase is not NodePhase.READY:
                continue
            workers = tuple(snapshot.workers.get(inc.id, ()))
            if not workers:
                continue
            last = snapshot.last_attempts.get(key)
            on_node = last is not None and last.incarnation_id == inc.id
            number = last.number if last is not None and on_node else None
            jobs.append(ProbeJob(key, inc, number, spec, workers, snapshot.slots[key].run_id))
        return jobs

    async def probe_job(self, incarnation_id: int) -> ProbeJob | None:
        """The probe of one incarnation as the store has it now (None unless it is READY
        with workers, in a fleet with a workload): for a node that became READY, or a slot
        whose workload actions just ran, after the snapshot of the tick was read."""
        async with self._store.read() as r:
            inc = await r.incarnation(incarnation_id)
            if inc is None or inc.phase is not NodePhase.READY:
                return None
            spec = self._workloads.get(inc.fleet)
            slot = await r.slot(inc.fleet, inc.slot)
            workers = (await r.workers([inc.id])).get(inc.id, ())
            newest = await r.workload_attempts(inc.fleet, inc.slot, limit=1)
        if spec is None or slot is None or not workers:
            return None
        on_node = newest and newest[0].incarnation_id == inc.id
        number = newest[0].number if on_node else None
        return ProbeJob((inc.fleet, inc.slot), inc, number, spec, tuple(workers), slot.run_id)

    async def probe_slot(self, job: ProbeJob, *, retry: RetryPolicy = NO_RETRY) -> SlotProbe:
        """Probe one slot's workers (one fan-out); untracked, stamped when the answers are in
        (so a timer that starts at this probe never starts early). `retry` covers failures
        before the command starts (a fresh node's sshd that is not up yet)."""
        found = await self._targets(job.inc, job.workers)
        answers = None
        if isinstance(found, list):
            command = self._probe_command(job)
            answers = await run_on_all(
                found,
                command,
                pool=self._pool,
                retry=retry,
                command_timeout=self._options.probe_timeout,
                label="probe",
                quiet=True,  # one line per slot per poll: at info only when a worker failed
            )
        return await self._slot_probe(job, found, answers, self._clock())

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
        self._busy = {i: w for i, w in self._busy.items() if i in live}
        self._last = {k: p for k, p in self._last.items() if p.incarnation_id in live}

    async def prune_connections(self, live: set[int]) -> None:
        """Close idle pooled connections to workers of incarnations that are not live."""
        await self._pool.prune_incarnations({str(i) for i in live})

    def _probe_command(self, job: ProbeJob) -> str:
        return sh_command(probe_script(layout.attempt_dir(job.run_id, job.attempt)))

    async def _slot_probe(
        self,
        job: ProbeJob,
        found: list[Target] | str,
        answers: list[WorkerResult] | None,
        now: datetime,
    ) -> SlotProbe:
        if isinstance(found, str) or answers is None:
            # No usable address: every worker is unreachable.
            why = found if isinstance(found, str) else "no targets"
            workers = tuple(WorkerProbe.unreachable(w.index, why) for w in job.workers)
        else:
            await self._hosts.remember(job.inc, found, answers)
            workers = tuple(_worker_probe(r) for r in answers)
        return SlotProbe(
            fleet=job.key[0],
            slot=job.key[1],
            incarnation_id=job.inc.id,
            attempt=job.attempt,
            observed_at=now,
            workers=workers,
            busy=self._busy.get(job.inc.id, ()),
            blocked=self._blocked(job.spec),
        )

    async def _targets(
        self, inc: IncarnationRecord, workers: Sequence[WorkerRecord]
    ) -> list[Target] | str:
        """The targets, or why there are none (e.g. no external IP)."""
        try:
            return await self._hosts.targets(inc, workers)
        except ValueError as exc:
            return str(exc)

    def _blocked(self, spec: WorkloadSpec) -> str | None:
        """Why a launch cannot work now, as far as the daemon itself can tell."""
        missing = sorted(var for var in spec.secrets.values() if var not in self._environ)
        if missing:
            return f"the daemon's environment lacks {', '.join(missing)} (workload.secrets)"
        absent = sorted(local for local in spec.files if not Path(local).is_file())
        if absent:
            return f"workload.files: {', '.join(absent)} not found"
        return None

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
        now = now or self._clock()
        bound = log.bind(fleet=_slot_of(action)[0], slot=_slot_of(action)[1], action=action.kind)
        try:
            if isinstance(action, FinishAttempt):
                await self._finish(action, now)
            elif isinstance(action, MarkSlotDone):
                async with self._store.write() as tx:
                    await tx.update_slot(action.fleet, action.slot, now, done=True,
                                         reason=action.reason)  # fmt: skip
            elif isinstance(action, StopWorkload):
                await self._stop(action, now)
            elif isinstance(action, LaunchWorkload):
                await self._launch(action, now)
            else:
                raise TypeError(f"not a workload action: {action.kind}")
        except (StaleWrite, NotFound) as exc:
            # The records moved on since the plan (e.g. the node died meanwhile): skipped,
            # as the executor skips a stale node action; the next plan decides afresh.
            bound.info("workload.stale_action", error=str(exc))

    async def _finish(self, a: FinishAttempt, now: datetime) -> None:
        async with self._store.write() as tx:
            await tx.finish_attempt(
                a.attempt_id,
                a.outcome,
                now,
                exit_codes=a.exit_codes,
                detail=a.detail,
                reason=f"{a.fleet}/{a.slot}: {a.reason}",
            )
        log.info("workload.finished", fleet=a.fleet, slot=a.slot, attempt=a.attempt,
                 outcome=a.outcome.value, detail=a.detail)  # fmt: skip

    async def _stop(self, a: StopWorkload, now: datetime) -> None:
        s = await self._slice(a.incarnation_id)
        if s is None:
            return
        await self._cleanup(s, a.attempt, now)

    async def _launch(self, a: LaunchWorkload, now: datetime) -> None:
        """LaunchWorkload: preconditions, then the attempt's record, then its runs."""
        bound = log.bind(fleet=a.fleet, slot=a.slot, attempt=a.attempt, node=a.node_name)
        spec = self._workloads.get(a.fleet)
        s = await self._slice(a.incarnation_id)
        if spec is None or s is None:
            bound.info("workload.launch_skipped", why="no workload or the node is not READY")
            return
        secrets = self._read_secrets(spec)
        if secrets is None:
            bound.warning("workload.launch_blocked", why=self._blocked(spec))
            return
        try:
            files = await asyncio.to_thread(_local_files, spec)
        except (OSError, ValueError) as exc:
            # Gone since the probe checked: the next probe reports it (SlotProbe.blocked).
            bound.warning("workload.launch_blocked", why=f"workload.files: {exc}")
            return
        slot = await self._record_attempt(a, s, now)
        if slot is None:
            bound.info("workload.launch_skipped", why="the attempt is not running any more")
            return
        if secrets:
            # Overwritten at every launch: the values are the daemon's current ones.
            contents = secrets_file_contents(secrets)
            files.append(FileUpload(layout.secrets_path(slot.run_id), contents, 0o600))
        if files and not await self._upload(s, files):
            return
        states = await self._start_runs(a, s, spec, slot, with_secrets=bool(secrets))
        failed = {w: why for w, why in states.items() if why not in ("started", "running")}
        (bound.warning if failed else bound.info)(
            "workload.launched", resume=a.attempt_id is not None, workers=states
        )
        if failed:
            message = f"attempt {a.attempt} did not start on workers {sorted(failed)}: {failed}"
            await self._event(s, "workload.launch_failed", now, message, workers=failed)

    async def _record_attempt(
        self, a: LaunchWorkload, s: _Slice, now: datetime
    ) -> SlotRecord | None:
        """A new attempt: free the TPU of the previous one, then record this one (intent
        before the launch). A resume: check that the attempt still runs. Returns the slot's
        record as the launch's environment reports it, or None to stop here."""
        if a.attempt_id is not None:
            async with self._store.read() as r:
                recorded = await r.workload_attempt(a.attempt_id)
            return s.slot if recorded is not None and recorded.ended_at is None else None
        if a.clean_after is not None and not await self._cleanup(s, a.clean_after, now):
            return None
        async with self._store.write() as tx:
            attempt = await tx.start_attempt(s.inc.id, now, reason=a.reason)
            if attempt.number != a.attempt:  # a stale plan: roll the record back
                raise StaleWrite(f"attempt number of {a.fleet}/{a.slot}", a.attempt,
                                 attempt.number)  # fmt: skip
            # After this tick's FinishAttempt: TPUCARED_FAILURES counts that failure.
            return await tx.slot(a.fleet, a.slot) or s.slot

    async def _start_runs(
        self, a: LaunchWorkload, s: _Slice, spec: WorkloadSpec, slot: SlotRecord, *,
        with_secrets: bool,
    ) -> dict[int, str]:  # fmt: skip
        """Launch the attempt detached on every worker; each worker's launch state."""
        run_dir = layout.attempt_dir(slot.run_id, a.attempt)
        command = layout.workload_command(spec)
        secrets_file = layout.secrets_path(slot.run_id) if with_secrets else None

        def launch_for(t: Target) -> str:
            env = workload_environment(
                fleet=a.fleet,
                slot=a.slot,
                node=s.inc.node_name,
                worker=t.worker,
                num_workers=len(s.targets),
                run_id=slot.run_id,
                attempt=a.attempt,
                preemptions=slot.preemptions,
                failures=slot.failures,
                env=spec.env,
            )
            return sh_command(launch_script(run_dir, command, env, secrets_file))

        results = await run_on_all(
            s.targets,
            launch_for,
            pool=self._pool,
            retry=self._options.retry,
            command_timeout=self._options.command_timeout,
            label="launch",
        )
        await self._hosts.remember(s.inc, s.targets, results)
        return {r.worker: _launch_state(r) for r in results}

    def _read_secrets(self, spec: WorkloadSpec) -> dict[str, str] | None:
        """Secret name -> value from the daemon's environment (None if one is missing),
        each value registered for redaction before anything could log it."""
        values: dict[str, str] = {}
        for name, var in spec.secrets.items():
            value = self._environ.get(var)
            if value is None:
                return None
            register_secret(value)
            values[name] = value
        return values

    async def _upload(self, s: _Slice, files: list[FileUpload]) -> bool:
        results = await upload(
            s.targets,
            files,
            pool=self._pool,
            retry=self._options.retry,
            command_timeout=self._options.command_timeout,
        )
        await self._hosts.remember(s.inc, s.targets, results)
        failed = {r.worker: _why(r) for r in results if not r.ok}
        if failed:
            # The attempt stays recorded: the next probe shows it never started and the
            # planner launches it again or fails it.
            log.warning("workload.upload_failed", fleet=s.inc.fleet, slot=s.inc.slot,
                        node=s.inc.node_name, workers=failed)  # fmt: skip
        return not failed

    async def _cleanup(self, s: _Slice, attempt: int, now: datetime) -> bool:
        """Free the TPU of `attempt` on every worker; True when every worker is clean.
        Busy workers are remembered for the next probe (the planner replaces the node)."""
        script = cleanup_script(
            layout.attempt_dir(s.slot.run_id, attempt),
            grace_seconds=self._options.cleanup_grace,
            device_patterns=self._options.device_patterns,
            lockfile=self._options.lockfile,
        )
        results = await run_on_all(
            s.targets,
            sh_command(script),
            pool=self._pool,
            retry=self._options.retry,
            command_timeout=self._options.command_timeout,
            label="cleanup",
        )
        await self._hosts.remember(s.inc, s.targets, results)
        report: dict[int, str] = {}
        busy: list[int] = []
        for r in results:
            if not r.completed or r.exit_status != 0:
                report[r.worker] = f"not cleaned: {_why(r)}"
                continue
            try:
                c = parse_cleanup(r.stdout_tail)
            except ScriptOutputError as exc:
                report[r.worker] = f"not cleaned: {exc}"
                continue
            report[r.worker] = f"{c.state.value} (group {c.group}, {c.holders_killed} holders)"
            if c.state is CleanupState.BUSY:
                busy.append(r.worker)
                report[r.worker] += f" held by pids {list(c.busy_pids)}"
        clean = all(v.startswith(CleanupState.CLEAN.value) for v in report.values())
        if busy:
            self._busy[s.inc.id] = tuple(sorted(busy))
        else:
            self._busy.pop(s.inc.id, None)
        (log.info if clean else log.warning)(
            "workload.cleanup", fleet=s.inc.fleet, slot=s.inc.slot, attempt=attempt, workers=report
        )
        if not clean:
            message = f"cleanup of attempt {attempt}: {report}"
            await self._event(s, "workload.cleanup_incomplete", now, message, workers=report)
        return clean

    async def _slice(self, incarnation_id: int) -> _Slice | None:
        async with self._store.read() as r:
            inc = await r.incarnation(incarnation_id)
            if inc is None or inc.phase is not NodePhase.READY:
                return None
            workers = (await r.workers([inc.id])).get(inc.id, ())
            slot = await r.slot(inc.fleet, inc.slot)
        if slot is None or not workers:
            return None
        targets = await self._targets(inc, workers)
        if isinstance(targets, str):
            log.warning("workload.no_targets", node=inc.node_name, why=targets)
            return None
        return _Slice(inc, slot, targets)

    async def _event(
        self, s: _Slice, kind: str, now: datetime, message: str, **details: object
    ) -> None:
        async with self._store.write() as tx:
            await tx.append_event(kind, f"{s.inc.node_name}: {message}", now, fleet=s.inc.fleet,
                                  slot=s.inc.slot, node=s.inc.node_name,
                                  incarnation_id=s.inc.id, details=details)  # fmt: skip


def _slot_of(a: Action) -> tuple[str, int]:
    assert isinstance(a, LaunchWorkload | StopWorkload | FinishAttempt | MarkSlotDone)
    return (a.fleet, a.slot)


def chains_by_slot(actions: Iterable[Action]) -> dict[tuple[str, int], list[Action]]:
    """Workload actions grouped by slot, each slot's in plan order: one chain per slot."""
    chains: dict[tuple[str, int], list[Action]] = {}
    for a in actions:
        chains.setdefault(_slot_of(a), []).append(a)
    return chains


def _local_files(spec: WorkloadSpec) -> list[FileUpload]:
    return [FileUpload.from_local(local, remote) for local, remote in spec.files.items()]


def _why(r: WorkerResult) -> str:
    if r.error is not None:
        return f"{r.error.value}: {r.error_message}"
    if r.exit_signal is not None:
        return f"killed by SIG{r.exit_signal}"
    tail = r.stderr_tail.strip().splitlines()[-1:] or [""]
    return f"exit {r.exit_status}" + (f": {tail[0][:200]}" if tail[0] else "")


def _worker_probe(r: WorkerResult) -> WorkerProbe:
    """One worker's probe answer; anything but a well-formed answer is 'unreachable'."""
    if not r.completed or r.exit_status != 0:
        return WorkerProbe.unreachable(r.worker, _why(r))
    try:
        p = parse_probe(r.stdout_tail)
    except ScriptOutputError as exc:
        return WorkerProbe.unreachable(r.worker, str(exc))
    if p.state is RunState.RUNNING:
        return WorkerProbe.running(r.worker, p.log_bytes)
    if p.state is RunState.EXITED:
        assert p.exit_code is not None
        return WorkerProbe.exited(r.worker, p.exit_code, p.log_bytes)
    return WorkerProbe.gone(r.worker, p.reason or "no-run")


def _launch_state(r: WorkerResult) -> str:
    if not r.completed:
        return _why(r)
    try:
        launched = parse_launch(r.stdout_tail)
    except ScriptOutputError as exc:
        return f"{_why(r)}: {exc}"
    if launched.state is LaunchState.ERROR:
        return f"error: {launched.reason}"
    if launched.state is LaunchState.EXITED:
        return f"exited {launched.exit_code}"
    return launched.state.value
