"""The workload runner: probes the workers of every slice, and carries out workload actions.

Where it sits, in the daemon's tick (observe -> probe -> plan -> execute):
    probes = await runner.probe(snapshot)                      # one SSH command per worker
    plan = plan_tick(specs, observations, snapshot, probes, now, policy, owner, ...)
    node_plan, workload_actions = WorkloadRunner.split(plan)
    ... the executor runs node_plan (node replacements are DeleteNode: its business) ...
    await runner.execute_all(workload_actions, now=plan.now)

It decides nothing (core/workload.py does): `execute` follows the contract in
core/workload_actions.py, and what it finds out that the planner must know (a TPU still held
after cleanup, a secret missing from the daemon's environment) reaches the planner through
the next `probe`. Every remote step goes through tpucared.ssh over one long-lived
`ConnectionPool`; the worker-side paths are in runtime/workload_layout.py, targets and host
key pins in runtime/workload_hosts.py. Secret values are read from the daemon's environment
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
from tpucared.core.actions import Action
from tpucared.core.model import (
    FleetSpec,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
    WorkerRecord,
    WorkloadSpec,
)
from tpucared.core.plan import Plan
from tpucared.core.snapshot import SlotKey
from tpucared.core.workload_actions import (
    WORKLOAD_ACTIONS,
    FinishAttempt,
    LaunchWorkload,
    MarkSlotDone,
    StopWorkload,
)
from tpucared.core.workload_inputs import SlotProbe, TickSnapshot, WorkerProbe, track
from tpucared.logging import register_secret
from tpucared.runtime import workload_layout as layout
from tpucared.runtime.workload_hosts import HostKeyFetcher, WorkerHosts
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
        self._pool = ConnectionPool(key, concurrency=ssh.concurrency)
        self._hosts = WorkerHosts(store, ssh, fetch_host_keys)
        self._last: dict[SlotKey, SlotProbe] = {}  # the previous tick's probes (for `track`)
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
        fan-out: the run of the slot's newest attempt on it (or, for an idle slot, a run
        that does not exist, which still tells whether each worker answers)."""
        now = now or self._clock()
        jobs = _probe_jobs(snapshot, self._workloads)
        targets = await asyncio.gather(
            *(self._targets(inc, snapshot.workers[inc.id]) for _, inc, _, _ in jobs)
        )
        commands: dict[Target, str] = {}
        for (key, _, number, _), found in zip(jobs, targets, strict=True):
            if isinstance(found, list):
                run_dir = layout.attempt_dir(snapshot.slots[key].run_id, number)
                command = sh_command(probe_script(run_dir))
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
        for (key, inc, number, spec), found in zip(jobs, targets, strict=True):
            if isinstance(found, str):  # no usable address: every worker is unreachable
                workers = tuple(
                    WorkerProbe.unreachable(w.index, found) for w in snapshot.workers[inc.id]
                )
            else:
                answers = [by_target[t] for t in found]
                await self._hosts.remember(inc, found, answers)
                workers = tuple(_worker_probe(r) for r in answers)
            fresh = SlotProbe(
                fleet=key[0],
                slot=key[1],
                incarnation_id=inc.id,
                attempt=number,
                observed_at=now,
                workers=workers,
                busy=self._busy.get(inc.id, ()),
                blocked=self._blocked(spec),
            )
            probes[key] = track(self._last.get(key), fresh)
        self._last = dict(probes)
        live = {inc.id for inc in snapshot.nodes.values()}
        self._busy = {i: w for i, w in self._busy.items() if i in live}
        await self._pool.prune(commands)
        return probes

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
        chains: dict[tuple[str, int], list[Action]] = {}
        for a in actions:
            if not self.handles(a):
                raise TypeError(f"not a workload action: {a.kind}")
            chains.setdefault(_slot_of(a), []).append(a)
        at = now or self._clock()

        async def run(chain: list[Action]) -> None:
            for a in chain:
                await self.execute(a, now=at)

        async with asyncio.TaskGroup() as group:
            for chain in chains.values():
                group.create_task(run(chain))

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


_Job = tuple[SlotKey, IncarnationRecord, int | None, WorkloadSpec]


def _probe_jobs(snapshot: TickSnapshot, workloads: Mapping[str, WorkloadSpec]) -> list[_Job]:
    """(slot, its READY incarnation, the attempt to probe there, the workload) for every
    slot of a fleet with a workload whose node is READY with workers recorded."""
    jobs: list[_Job] = []
    for key, inc in sorted(snapshot.nodes.items()):
        spec = workloads.get(inc.fleet)
        if spec is None or key not in snapshot.slots or inc.phase is not NodePhase.READY:
            continue
        if not snapshot.workers.get(inc.id):
            continue
        last = snapshot.last_attempts.get(key)
        number = last.number if last is not None and last.incarnation_id == inc.id else None
        jobs.append((key, inc, number, spec))
    return jobs


def _slot_of(a: Action) -> tuple[str, int]:
    assert isinstance(a, LaunchWorkload | StopWorkload | FinishAttempt | MarkSlotDone)
    return (a.fleet, a.slot)


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
