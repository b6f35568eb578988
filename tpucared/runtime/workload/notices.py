"""The preemption notice, heard at once: one long wait per slice with a running attempt.

Where it sits: `WorkloadJobs.dispatch` (jobs.py) calls `sync(snapshot, probe_jobs)` every
tick. For each slot whose newest attempt runs on its READY node, one background task keeps a
wait going on worker 0 (`Launcher.wait_notice`; the SSH launcher's is launch/sh/notice_wait.sh
on the pooled connection: it holds the metadata server's `instance/preempted` request as
run.sh's watcher does, so it costs the worker nothing while it waits) until the run's notice
watcher (launch/sh/run.sh) writes `notice`. Then it carries out what the rule
(core/workload/notices.py `on_notice`: which other slices' runs get the signal, until when the
workload has to stop) says:

1. sends the signal to the run on every worker of the other slices the rule names
   (`Launcher.signal`, launch/sh/signal.sh: a multislice job checkpoints and stops as one, as a
   single slice does) and records a `preemption.notice` event (the notice's time as the
   worker saw it, the rule's `stop_by`, how many other runs got the signal);
2. asks for a probe of the slot now (`on_news`): the planner reads the notice from the probe
   (core/workload/judge.py) and leaves the workload to checkpoint;
3. waits on the same worker until the run stopped, at most as long as the rule says
   (`stop_grace` after the notice, and a little slack), and asks for a probe again: the
   planner then ends the attempt as PREEMPTED and gives the node up (DEAD, deleted at once,
   replaced) without waiting for the API.

A run may stop before the watch's answer comes back, and the poll's probe read it first: the
planner then ends the attempt on the probe's word, and notice_events.py's `record_heard` writes
the event in the attempt's end's transaction (once per node: whichever path comes second
writes nothing).

Worker 0 stands for the slice: a notice comes to every worker of a preempted slice, and the
probe that follows reads them all. A multislice job has one wait per slice. A wait that
fails (the connection dropped, the worker unreachable) is asked again after `RETRY_S`; the
watcher on the VM does not depend on it, and the poll's probe still finds the notice at the
latest one poll later. A wait ends by itself after `WAIT_S` and is asked again, so no
command runs for ever. The tasks are cancelled when the attempt ends or its node goes, and at
shutdown; they write nothing but the event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import structlog

from tpucared.core.vocab.snapshot import SlotKey
from tpucared.core.workload.inputs import TickSnapshot
from tpucared.core.workload.notices import NoticeResponse, on_notice
from tpucared.ports.launcher import NoticeResult, NoticeState, NoticeWait
from tpucared.runtime.clock import Clock
from tpucared.runtime.workload.runner import ProbeJob, WorkloadRunner
from tpucared.store import Store

log = structlog.get_logger(__name__)

WAIT_S = 600.0  # one wait for a notice; then asked again
RETRY_S = 5.0  # after a wait that could not run

Watched = tuple[SlotKey, int, int, int]  # (slot, incarnation id, attempt number, slice)


class NoticeWatches:
    def __init__(
        self,
        runner: WorkloadRunner,
        store: Store,
        clock: Clock,
        on_news: Callable[[SlotKey, str], None],
        *,
        retry_s: float = RETRY_S,
    ) -> None:
        self._runner = runner
        self._store = store
        self._clock = clock
        self._on_news = on_news
        self._retry_s = retry_s
        self._tasks: dict[Watched, asyncio.Task[None]] = {}
        self._over: set[Watched] = set()  # watched to their end: not started again
        self.heard = 0  # notices heard (for tests and the tick's log)

    def __len__(self) -> int:
        return sum(1 for t in self._tasks.values() if not t.done())

    def sync(self, snapshot: TickSnapshot, jobs: Sequence[ProbeJob]) -> None:
        """Watch exactly the running attempts on READY nodes of `snapshot` (`jobs`: its
        `runner.probe_jobs`, computed once a tick by the caller)."""
        wanted: dict[Watched, ProbeJob] = {}
        for job in jobs:
            last = snapshot.last_attempts.get(job.key)
            if job.attempt is None or last is None or last.ended_at is not None:
                continue
            for part in range(len(job.parts)):
                wanted[(job.key, job.inc.id, job.attempt, part)] = job
        for watched, task in list(self._tasks.items()):
            if watched not in wanted:
                task.cancel()
                del self._tasks[watched]
        self._over &= set(wanted)
        for watched, job in wanted.items():
            if watched in self._tasks or watched in self._over:
                continue
            key = job.key
            self._tasks[watched] = asyncio.get_running_loop().create_task(
                self._watch(watched, job), name=f"notice watch {key[0]}/{key[1]}/{watched[3]}"
            )

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, watched: Watched, job: ProbeJob) -> None:
        part = watched[3]
        try:
            notice = await self._wait(job, NoticeWait.NOTICE, WAIT_S, part)
            if notice is None:
                return  # the attempt ended without a notice
            assert notice.at is not None
            self.heard += 1
            at = datetime.fromtimestamp(notice.at, UTC)
            todo = on_notice(part, len(job.parts), job.spec, at)  # the rule: core/workload
            sent = await self._runner.signal_slices(job, todo.others, todo.signal)
            await self._record(job, todo, sent)
            self._on_news(job.key, "a preemption notice")
            await self._wait(job, NoticeWait.STOPPED, todo.wait_for_stop(self._clock.now()), part)
            self._on_news(job.key, "the workload stopped after its notice")
        except asyncio.CancelledError:
            raise
        except Exception:  # contained: the poll's probes still find the notice
            log.exception("notice.watch_failed", fleet=job.key[0], slot=job.key[1])
        finally:
            self._over.add(watched)
            with contextlib.suppress(KeyError):
                if self._tasks[watched] is asyncio.current_task():
                    del self._tasks[watched]

    async def _wait(
        self, job: ProbeJob, what: NoticeWait, seconds: float, part: int
    ) -> NoticeResult | None:
        """Ask until the answer says something: None when the run ended without a notice."""
        while True:
            result = await self._runner.wait_notice(job, what, seconds, part=part)
            if isinstance(result, str):
                log.debug("notice.wait_failed", fleet=job.key[0], slot=job.key[1], why=result)
                await asyncio.sleep(self._retry_s)
                continue
            if result.state is NoticeState.ENDED:
                return None
            if result.state is NoticeState.TIMEOUT and what is NoticeWait.NOTICE:
                continue
            return result

    async def _record(self, job: ProbeJob, todo: NoticeResponse, sent: int) -> None:
        when = todo.notice_at
        fleet, slot = job.key
        inc = job.parts[todo.heard][0]
        also = ""
        if len(job.parts) > 1:
            also = f", and so did {sent} run(s) on the job's other slices"
        log.warning("preemption.notice", fleet=fleet, slot=slot, node=inc.node_name,
                    at=when.isoformat(), signalled_other_slices=sent)  # fmt: skip
        async with self._store.write() as tx:
            # Once per node: the attempt's end records it when the probe read it first.
            await tx.append_event_once(
                "preemption.notice",
                f"{inc.node_name}: preemption notice on {fleet}/{slot} (attempt "
                f"{job.attempt}); the workload got SIG{todo.signal}{also}",
                self._clock.now(),
                fleet=fleet,
                slot=slot,
                node=inc.node_name,
                incarnation_id=inc.id,
                details={"notice_at": when.isoformat(), "attempt": job.attempt,
                         "slice": inc.slice, "stop_by": todo.stop_by.isoformat()},
            )  # fmt: skip
