"""The workload executor: the runner's acting side, workload actions carried out on a slice.

`WorkloadExecutor.execute` follows the contract in core/workload/actions.py, one action at a
time: FinishAttempt and MarkSlotDone are store writes; StopWorkload frees the TPU of an attempt
on every worker (`_cleanup`); LaunchWorkload checks its preconditions, frees the TPU of the
previous attempt on the node (on a node's first launch: whatever holds its accelerator), runs
the fleet's health check (the pre-launch check: one SSH command per worker), records the new
one (intent before the launch) and starts it detached on every worker: the workload is
(re)launched here, in `_launch`. A worker whose accelerator stays held or that fails the health
check makes its node a bad host (a `node.bad_host` event; core/workload/bad_hosts.py decides).
Secret values are read from the daemon's environment at launch, registered for log redaction,
and handed to the launcher (`Launcher.install`; the SSH launcher writes them to a 0600 file
through SSH stdin): never the database, node metadata, logs, or a command line. A launch that
the rules of core/workload/launch_gate.py forbid now (a secret's variable gone since the plan;
its own cleanup left a worker unclean) is refused, with a `workload.launch_refused` event in the
rule's words. What the planner must know of a cleanup (workers whose TPU stays held, workers
it left unclean, workers that failed the health check) waits in `busy`, `unclean` and
`unhealthy` for the next probe. The steps of a fleet's `on_maintenance` (a checkpoint before a
window, its early start) are maintenance.py's. Every remote step
goes through the runner's `Launcher` (tpucared/ports/launcher.py); the runner
(runtime/workload/runner.py) makes one executor and hands it every workload action.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import structlog

from tpucared.core.model.records import IncarnationRecord, SlotRecord, WorkerRecord
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.vocab.actions import Action
from tpucared.core.workload.actions import (
    CheckpointForMaintenance,
    FinishAttempt,
    LaunchWorkload,
    MarkSlotDone,
    StartMaintenance,
    StopWorkload,
)
from tpucared.core.workload.bad_hosts import bad_host_ends
from tpucared.core.workload.gang import acting_on, all_or_none
from tpucared.core.workload.inputs import Unclean
from tpucared.core.workload.launch_gate import refuse_after_cleanup, refuse_secrets
from tpucared.logsetup import register_secret
from tpucared.ports.launcher import (
    CleanupResult,
    CleanupState,
    HealthCheck,
    HealthState,
    Launch,
    Launcher,
    LaunchResult,
    LaunchState,
    Place,
    Reply,
    Run,
    SliceOf,
    WorkerFile,
)
from tpucared.runtime.workload.maintenance import MaintenanceSteps
from tpucared.runtime.workload.notice_events import record_heard
from tpucared.store import NotFound, StaleWrite, Store

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class _Slice:
    """A slot's READY incarnation as stored when an action runs, where its workers are."""

    inc: IncarnationRecord
    slot: SlotRecord
    place: Place
    inc_workers: tuple[WorkerRecord, ...] = ()  # as recorded: the coordinator's address


class WorkloadExecutor:
    """Carries out workload actions on the workers of a slot's READY incarnation."""

    def __init__(
        self,
        store: Store,
        workloads: Mapping[str, WorkloadSpec],
        launcher: Launcher,
        environ: Mapping[str, str],
        slice_counts: Mapping[str, int] | None = None,
    ) -> None:
        self._store = store
        self._slice_counts = dict(slice_counts or {})  # fleet -> slices per slot, if > 1
        self._workloads = workloads
        self._launcher = launcher
        self._environ = environ
        # Incarnation -> workers whose TPU the last cleanup left held, and -> (attempt, the
        # workers it left unclean, and why): the next probe says so (SlotProbe.busy, .unclean).
        self.busy: dict[int, tuple[int, ...]] = {}
        self.unclean: dict[int, tuple[int, tuple[tuple[int, str], ...]]] = {}
        # Incarnation -> workers that failed the health check, and -> the end times of the
        # slot's earlier bad hosts (SlotProbe.unhealthy, .bad_hosts).
        self.unhealthy: dict[int, tuple[int, ...]] = {}
        self.bad_hosts: dict[int, tuple[datetime, ...]] = {}
        self.maintenance = MaintenanceSteps(
            store, launcher, lambda f, s, i: self._slices(f, s, i, whole=False)
        )

    def forget(self, live: set[int]) -> None:
        """Drop what is remembered about incarnations that are not live any more."""
        self.busy = {i: w for i, w in self.busy.items() if i in live}
        self.unclean = {i: u for i, u in self.unclean.items() if i in live}
        self.unhealthy = {i: w for i, w in self.unhealthy.items() if i in live}
        self.bad_hosts = {i: b for i, b in self.bad_hosts.items() if i in live}

    async def execute(self, action: Action, now: datetime) -> None:
        """One workload action; one whose records moved on since the plan is skipped."""
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
            elif isinstance(action, CheckpointForMaintenance):
                await self.maintenance.checkpoint(action, now)
            elif isinstance(action, StartMaintenance):
                await self.maintenance.start(action, now)
            else:
                raise TypeError(f"not a workload action: {action.kind}")
        except (StaleWrite, NotFound) as exc:
            # The records moved on since the plan (e.g. the node died meanwhile): skipped,
            # as the node executor skips a stale node action; the next plan decides afresh.
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
            await record_heard(tx, a, now)  # unless the notice watch recorded them first
        log.info("workload.finished", fleet=a.fleet, slot=a.slot, attempt=a.attempt,
                 outcome=a.outcome.value, detail=a.detail)  # fmt: skip

    async def _stop(self, a: StopWorkload, now: datetime) -> None:
        # A multislice slot's stop reaches every slice still READY, whichever was lost.
        gang = await self._slices(a.fleet, a.slot, a.incarnation_id, whole=False)
        if gang:
            await self._cleanup(gang, a.attempt, now)

    async def _launch(self, a: LaunchWorkload, now: datetime) -> None:
        """LaunchWorkload: preconditions, then the attempt's record, then its runs."""
        bound = log.bind(fleet=a.fleet, slot=a.slot, attempt=a.attempt, node=a.node_name)
        spec = self._workloads.get(a.fleet)
        gang = await self._slices(a.fleet, a.slot, a.incarnation_id, whole=True)
        if spec is None or not gang:
            bound.info("workload.launch_skipped", why="no workload or the node is not READY")
            return
        ready = await self._ready(a, spec, gang, now)
        if ready is None:
            return
        secrets, files = ready
        slot = await self._record_attempt(a, gang, now)
        if slot is None:
            bound.info("workload.launch_skipped", why="the attempt is not running any more")
            return
        if (files or secrets) and not all(
            await asyncio.gather(*(self._install(s, files, secrets) for s in gang))
        ):
            return
        replies = await self._start_runs(a, gang, spec, slot, with_secrets=bool(secrets))
        states = {w: _launch_state(r) for w, r in replies.items()}
        failed = {w: states[w] for w, r in replies.items() if r.value is None
                  or not r.value.state.runs}  # fmt: skip
        (bound.warning if failed else bound.info)(
            "workload.launched", resume=a.attempt_id is not None, workers=states
        )
        if failed:
            message = f"attempt {a.attempt} did not start on workers {sorted(failed)}: {failed}"
            await self._event(gang[0], "workload.launch_failed", now, message, workers=failed)

    async def _ready(
        self, a: LaunchWorkload, spec: WorkloadSpec, gang: list[_Slice], now: datetime
    ) -> tuple[dict[str, str], list[WorkerFile]] | None:
        """What the launch needs, checked now by the rules the plan applied
        (core/workload/launch_gate.py): the secrets, the files, and for a new attempt after
        an earlier one on the node a clean slate. None when the launch is refused (the
        environment or the node changed since the plan): a `workload.launch_refused` event."""
        refused = refuse_secrets(spec, a.attempt, self._environ.keys())
        if refused is not None:
            await self._refuse(gang[0], now, refused, a.attempt)
            return None
        secrets = self._read_secrets(spec)
        try:
            files = await asyncio.to_thread(_local_files, spec)
        except (OSError, ValueError) as exc:
            # Gone since the probe checked: the next probe reports it (SlotProbe.blocked).
            why = f"attempt {a.attempt} not launched: workload.files: {exc}"
            await self._refuse(gang[0], now, why, a.attempt)
            return None
        if a.attempt_id is None:
            # The pre-launch check: free the TPU (of the previous attempt on the node, if any),
            # then the fleet's health check. A resume skips it: its other workers run.
            check = None
            if spec.health_check is not None:
                check = HealthCheck(spec.health_check, spec.health_check_timeout)
            left = await self._cleanup(gang, a.clean_after, now, check)
            if left:
                if a.clean_after is not None:
                    refused = refuse_after_cleanup(a.attempt, Unclean(a.clean_after, left))
                else:
                    whys = "; ".join(f"{w}: {why}" for w, why in left)
                    refused = f"attempt {a.attempt} not launched: the pre-launch check ({whys})"
                await self._refuse(gang[0], now, refused or whys, a.attempt)
                return None
        return secrets, files

    async def _refuse(self, s: _Slice, now: datetime, why: str, attempt: int) -> None:
        log.warning("workload.launch_refused", fleet=s.inc.fleet, slot=s.inc.slot,
                    attempt=attempt, why=why)  # fmt: skip
        await self._event(s, "workload.launch_refused", now, why, attempt=attempt)

    async def _record_attempt(
        self, a: LaunchWorkload, gang: list[_Slice], now: datetime
    ) -> SlotRecord | None:
        """A new attempt: record it (intent before the launch; the previous one's TPU is free
        by now). A resume: check that the attempt still runs. Returns the slot's record as
        the launch's environment reports it, or None to stop here."""
        if a.attempt_id is not None:
            async with self._store.read() as r:
                recorded = await r.workload_attempt(a.attempt_id)
            return gang[0].slot if recorded is not None and recorded.ended_at is None else None
        async with self._store.write() as tx:
            # On the gang's stand-in: its newest slice (core/workload/gang.py).
            attempt = await tx.start_attempt(a.incarnation_id, now, reason=a.reason)
            if attempt.number != a.attempt:  # a stale plan: roll the record back
                raise StaleWrite(f"attempt number of {a.fleet}/{a.slot}", a.attempt,
                                 attempt.number)  # fmt: skip
            # After this tick's FinishAttempt: TPUCARED_FAILURES counts that failure.
            return await tx.slot(a.fleet, a.slot) or gang[0].slot

    async def _start_runs(
        self, a: LaunchWorkload, gang: list[_Slice], spec: WorkloadSpec, slot: SlotRecord, *,
        with_secrets: bool,
    ) -> dict[int, Reply[LaunchResult]]:  # fmt: skip
        """Launch the attempt detached on every worker of every slice; each worker's answer,
        by gang worker (slice by slice)."""
        coordinator = gang[0].inc_workers[0].internal_ip if gang[0].inc_workers else ""

        async def launch_slice(s: _Slice) -> list[Reply[LaunchResult]]:
            where = None
            if len(gang) > 1:
                where = SliceOf(index=s.inc.slice, count=len(gang), coordinator=coordinator)
            launch = Launch(
                fleet=a.fleet,
                slot=a.slot,
                run=Run(slot.run_id, a.attempt),
                spec=spec,
                preemptions=slot.preemptions,
                failures=slot.failures,
                slice_of=where,
                secrets=with_secrets,
            )
            return await self._launcher.launch(s.place, launch)

        answers = await asyncio.gather(*(launch_slice(s) for s in gang))
        states: dict[int, Reply[LaunchResult]] = {}
        offset = 0
        for s, replies in zip(gang, answers, strict=True):
            states.update({offset + r.worker: r for r in replies})
            offset += s.place.size
        return states

    def _read_secrets(self, spec: WorkloadSpec) -> dict[str, str]:
        """Secret name -> value from the daemon's environment (every variable is there:
        `refuse_secrets` said so), each value registered for redaction before anything could
        log it."""
        values: dict[str, str] = {}
        for name, var in spec.secrets.items():
            value = self._environ[var]
            register_secret(value)
            values[name] = value
        return values

    async def _install(
        self, s: _Slice, files: list[WorkerFile], secrets: Mapping[str, str]
    ) -> bool:
        failed = await self._launcher.install(s.place, s.slot.run_id, files, secrets)
        if failed:
            # The attempt stays recorded: the next probe shows it never started and the
            # planner launches it again or fails it.
            log.warning("workload.upload_failed", fleet=s.inc.fleet, slot=s.inc.slot,
                        node=s.inc.node_name, workers=failed)  # fmt: skip
        return not failed

    async def _cleanup(
        self, gang: list[_Slice], attempt: int | None, now: datetime,
        check: HealthCheck | None = None,
    ) -> tuple[tuple[int, str], ...]:  # fmt: skip
        """Free the TPU (of `attempt`, if any) on every worker of every slice, then run the
        health `check`; the workers left unclean or unhealthy (numbered slice by slice)."""
        done = await asyncio.gather(*(self._cleanup_slice(s, attempt, now, check) for s in gang))
        unclean: list[tuple[int, str]] = []
        offset = 0
        for s, left in zip(gang, done, strict=True):
            unclean += [(offset + w, why) for w, why in left]
            offset += s.place.size
        return tuple(unclean)

    async def _cleanup_slice(
        self, s: _Slice, attempt: int | None, now: datetime, check: HealthCheck | None = None
    ) -> tuple[tuple[int, str], ...]:
        """Free the TPU of `attempt` on every worker; the workers left unclean, and why.
        They are remembered for the next probe (busy or unhealthy: the planner recycles the
        node as a bad host; all of them: the next launch cleans up again first, and says
        why)."""
        run = Run(s.slot.run_id, attempt) if attempt is not None else None
        replies = await self._launcher.cleanup(s.place, run, check)
        report: dict[int, str] = {}
        busy: list[int] = []
        bad: dict[int, CleanupResult] = {}
        clean: set[int] = set()
        for r in replies:
            c = r.value
            if c is None:
                report[r.worker] = f"not cleaned: {r.why}"
                continue
            if c.clean:
                clean.add(r.worker)
            report[r.worker] = f"{c.state.value} (group {c.group}, {c.holders_killed} holders)"
            if c.state is CleanupState.BUSY:
                busy.append(r.worker)
                bad[r.worker] = c
                report[r.worker] += f" held by pids {list(c.busy_pids)}"
            elif c.health is HealthState.FAILED:
                bad[r.worker] = c
                report[r.worker] = f"unhealthy: health check exit {c.health_code}"
        left = tuple((w, why) for w, why in sorted(report.items()) if w not in clean)
        unhealthy = tuple(sorted(w for w in bad if w not in busy))
        for memo, value in ((self.busy, tuple(sorted(busy))), (self.unhealthy, unhealthy)):
            if value:
                memo[s.inc.id] = value
            else:
                memo.pop(s.inc.id, None)
        if left and attempt is not None:
            self.unclean[s.inc.id] = (attempt, left)
        else:
            self.unclean.pop(s.inc.id, None)
        if bad:
            await self._bad_host(s, bad, now)
        (log.warning if left else log.info)(
            "workload.cleanup", fleet=s.inc.fleet, slot=s.inc.slot, attempt=attempt, workers=report
        )
        if left:
            message = f"cleanup of attempt {attempt}: {report}"
            await self._event(s, "workload.cleanup_incomplete", now, message, workers=report)
        return left

    async def _bad_host(self, s: _Slice, bad: Mapping[int, CleanupResult], now: datetime) -> None:
        """A `node.bad_host` event naming what failed on which worker, and the slot's earlier
        bad hosts read for the planner's budget (SlotProbe.bad_hosts)."""
        async with self._store.read() as r:
            earlier = await r.incarnations(s.inc.fleet, s.inc.slot, limit=200)
        self.bad_hosts[s.inc.id] = bad_host_ends(i for i in earlier if i.id != s.inc.id)
        workers: dict[int, dict[str, object]] = {}
        for w, c in sorted(bad.items()):
            if c.state is CleanupState.BUSY:
                workers[w] = {"failed": "accelerator held", "pids": list(c.busy_pids)}
            else:
                workers[w] = {"failed": "health check", "exit_code": c.health_code,
                              "output": list(c.health_output)}  # fmt: skip
        log.warning("node.bad_host", fleet=s.inc.fleet, slot=s.inc.slot, node=s.inc.node_name,
                    workers=workers)  # fmt: skip
        what = "; ".join(f"worker {w}: {d['failed']}" for w, d in workers.items())
        await self._event(s, "node.bad_host", now, f"bad host ({what})", workers=workers)

    async def _slices(
        self, fleet: str, slot_index: int, incarnation_id: int, *, whole: bool
    ) -> list[_Slice]:
        """The slot's slices to act on as stored now, located by the launcher: the one node
        `incarnation_id` of a single-slice slot; for a multislice slot (`incarnation_id` its
        stand-in's) every slice. Which ones, and a launch's all or none, are the core's
        (core/workload/gang.py `acting_on`, `all_or_none`; `whole`: a launch). Empty when
        there is nothing to act on."""
        expected = self._slice_counts.get(fleet, 1)
        async with self._store.read() as r:
            if expected > 1:
                live = await r.incarnations(fleet, slot_index, live_only=True)
            else:
                inc = await r.incarnation(incarnation_id)
                live = [inc] if inc is not None else []
            slices = acting_on(live, incarnation_id, expected, launch=whole)
            workers = await r.workers([i.id for i in slices])
            slot = await r.slot(fleet, slot_index)
        if slot is None:
            return []
        reached: dict[int, _Slice] = {}
        for inc in slices:
            recorded = workers.get(inc.id, ())
            place = await self._launcher.locate(inc, recorded) if recorded else "none"
            if isinstance(place, str):
                log.warning("workload.no_targets", node=inc.node_name, why=place)
                continue
            reached[inc.id] = _Slice(inc, slot, place, tuple(recorded))
        return all_or_none(slices, reached, launch=whole)

    async def _event(
        self, s: _Slice, kind: str, now: datetime, message: str, **details: object
    ) -> None:
        async with self._store.write() as tx:
            await tx.append_event(kind, f"{s.inc.node_name}: {message}", now, fleet=s.inc.fleet,
                                  slot=s.inc.slot, node=s.inc.node_name,
                                  incarnation_id=s.inc.id, details=details)  # fmt: skip


def _slot_of(a: Action) -> tuple[str, int]:
    assert isinstance(a, LaunchWorkload | StopWorkload | FinishAttempt | MarkSlotDone
                      | CheckpointForMaintenance | StartMaintenance)  # fmt: skip
    return (a.fleet, a.slot)


def chains_by_slot(actions: Iterable[Action]) -> dict[tuple[str, int], list[Action]]:
    """Workload actions grouped by slot, each slot's in plan order: one chain per slot."""
    chains: dict[tuple[str, int], list[Action]] = {}
    for a in actions:
        chains.setdefault(_slot_of(a), []).append(a)
    return chains


def _local_files(spec: WorkloadSpec) -> list[WorkerFile]:
    """`workload.files` read from the daemon's disk, each with its local permission bits."""
    files = []
    for local, remote in spec.files.items():
        path = Path(local)
        if not path.is_file():
            raise ValueError(f"{path} is not a regular file (directories are not supported)")
        files.append(WorkerFile(remote, path.read_bytes(), path.stat().st_mode & 0o777))
    return files


# ---------------------------------------------------------------------------------------------
# Also used by the probing side (runner.py)


def files_missing(spec: WorkloadSpec) -> str | None:
    """Why a launch cannot work now as far as the daemon's disk tells: `workload.files`
    missing (the secrets are the planner's to check: core/workload/launch_gate.py)."""
    absent = sorted(local for local in spec.files if not Path(local).is_file())
    if absent:
        return f"workload.files: {', '.join(absent)} not found"
    return None


# ---------------------------------------------------------------------------------------------


def _launch_state(r: Reply[LaunchResult]) -> str:
    launched = r.value
    if launched is None:
        return r.why or "no answer"
    if launched.state is LaunchState.ERROR:
        return f"error: {launched.reason}"
    if launched.state is LaunchState.EXITED:
        return f"exited {launched.exit_code}"
    return launched.state.value
