"""The slots' failed background jobs, contained: logged, recorded, held back, retried.

Where it sits: `WorkloadJobs` (jobs.py) runs each slot's probe or chain of workload actions as
a background task. Before this, an exception none of them expects went to the daemon's
`TaskSet`, which stopped the whole daemon (exit 1) for one slot's fault. Now the job catches
it and hands it here: `failed` logs it once (fleet, slot, job, error; the traceback only for
the first failure of a streak, so a fault that repeats does not flood the log), records a
`workload.job_failed` event (which `tpucared status` shows as a notice until the streak
ends), and remembers the streak; `held_back` keeps the slot's jobs from starting until its
backoff has passed, and `succeeded` ends the streak with a `workload.job_recovered` event.
The rules (the backoff, the messages) are pure, in core/workload/job_failures.py.

Error texts are redacted of the workload's secrets (logsetup) before they reach the log or
the database. Recording the event is best effort: if the database itself is what fails, the
log line is all there is, and the job is still retried.
"""

from __future__ import annotations

import structlog

from tpucared.core.vocab.snapshot import SlotKey
from tpucared.core.workload.job_failures import (
    JOB_FAILED,
    JOB_RECOVERED,
    JobFailures,
    error_text,
    failed,
    failed_message,
    held_back,
    restored,
)
from tpucared.logsetup import redact
from tpucared.runtime.clock import Clock
from tpucared.store import Store

log = structlog.get_logger(__name__)


class SlotFailures:
    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._streaks: dict[SlotKey, JobFailures] = {}

    def __contains__(self, key: SlotKey) -> bool:
        return key in self._streaks

    def held_back(self, key: SlotKey) -> bool:
        """The slot's last job failed and its backoff has not passed: start nothing there."""
        return held_back(self._streaks.get(key), self._clock.monotonic())

    def failing(self) -> dict[SlotKey, JobFailures]:
        return dict(self._streaks)

    async def restore(self) -> None:
        """The streaks the previous daemon recorded and did not see end (their slot's newest
        job event is a failure): the slot's next success records the end, so `status` does
        not show a notice that is over."""
        now = self._clock.monotonic()
        try:
            async with self._store.read() as r:
                events = await r.job_failures()
        except Exception as exc:  # best effort: the tick's own reads will say what is wrong
            log.warning("workload.job_failures_not_restored", error=redact(error_text(exc)))
            return
        for key, e in events.items():
            count = e.details.get("failures")
            self._streaks[key] = restored(
                str(e.details.get("job", "?")),
                count if isinstance(count, int) else 1,
                str(e.details.get("error", "")),
                now,
            )

    async def failed(self, key: SlotKey, job: str, exc: Exception) -> JobFailures:
        """One failed job of the slot: log it, hold the slot back, record the event."""
        first = key not in self._streaks
        streak = failed(
            self._streaks.get(key), key, job, redact(error_text(exc)), self._clock.monotonic()
        )
        self._streaks[key] = streak
        log.error(
            JOB_FAILED,
            fleet=key[0],
            slot=key[1],
            job=job,
            error=streak.error,
            failures=streak.count,
            retry_in_s=round(streak.delay, 1),
            # The traceback once per streak: enough to find the bug, not one per retry.
            exc_info=exc if first else None,
        )
        await self._record(
            JOB_FAILED,
            key,
            failed_message(key, streak),
            job=job,
            error=streak.error,
            failures=streak.count,
            retry_in_s=round(streak.delay, 1),
        )
        return streak

    async def succeeded(self, key: SlotKey, job: str) -> None:
        """A job of the slot ended well: a streak of failures, if any, is over."""
        streak = self._streaks.pop(key, None)
        if streak is None:
            return
        log.info(JOB_RECOVERED, fleet=key[0], slot=key[1], job=job, after=streak.count)
        message = f"{key[0]}/{key[1]}: workload job {job} ran again after {streak.count} failed"
        await self._record(JOB_RECOVERED, key, message, job=job, failures=streak.count)

    async def _record(self, kind: str, key: SlotKey, message: str, **details: object) -> None:
        try:
            async with self._store.write() as tx:
                await tx.append_event(
                    kind, message, self._clock.now(), fleet=key[0], slot=key[1], details=details
                )
        except Exception as exc:  # the database may be what fails: the log line stays
            log.warning("workload.job_event_not_recorded", fleet=key[0], slot=key[1],
                        kind=kind, error=redact(error_text(exc)))  # fmt: skip
