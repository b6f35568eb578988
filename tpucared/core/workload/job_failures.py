"""A slot's background job that failed unexpectedly: when it may run again, and what to say.

Where it sits: the runtime's `WorkloadJobs` (runtime/workload/jobs.py) runs each slot's probe
or chain of workload actions in the background. An exception none of them expects (a bug, a
database error, an SSH library failing in a way it does not report as a worker's result) is
contained to its slot: the runtime asks `failed` for the slot's new streak, logs it, records
a `workload.job_failed` event, and starts no job of that slot while `held_back` says so. The
next tick after the backoff starts the slot's job again (the plan decides it afresh: a chain
that failed half-way is re-planned from the store); its first success ends the streak
(`workload.job_recovered`). Other slots and the daemon are never stopped by it.

The wait is the core `Backoff` rule (core/model/backoff.py) in seconds, with a jitter derived
from the slot and the streak (`jitter`), so slots that fail together do not retry in step and
a streak's delays are reproducible. Times here are the runtime's monotonic seconds, passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tpucared.core.model.backoff import Backoff, jitter
from tpucared.core.vocab.snapshot import SlotKey

# 5 s, doubling, up to 5 min: a transient fault (a locked database, a dropped connection the
# library raised instead of reporting) is over by the first retries; a bug that fails every
# time costs one event and one log line per slot every 5 minutes, not one per poll.
JOB_RETRY: Final = Backoff(5.0, 300.0, jitter=0.5)
ERROR_WIDTH: Final = 300  # characters of the error kept in the event and the log line

JOB_FAILED: Final = "workload.job_failed"
JOB_RECOVERED: Final = "workload.job_recovered"


@dataclass(frozen=True)
class JobFailures:
    """A slot's streak of failed jobs: how many in a row, the last one's job and error, and
    when (monotonic seconds) the slot may run a job again."""

    job: str  # "probe", or the chain's action kinds ("finish,launch")
    count: int
    error: str
    retry_at: float
    delay: float  # the wait before retry_at, for the log and the event


def failed(
    previous: JobFailures | None,
    key: SlotKey,
    job: str,
    error: str,
    now: float,
    rule: Backoff[float] = JOB_RETRY,
) -> JobFailures:
    """The slot's streak after one more failed job."""
    count = (previous.count if previous is not None else 0) + 1
    delay = rule.delay(count, jitter("workload-job", key[0], key[1], count))
    return JobFailures(job=job, count=count, error=error, retry_at=now + delay, delay=delay)


def restored(job: str, count: int, error: str, now: float) -> JobFailures:
    """A streak the previous daemon recorded and did not see end: remembered so that the
    slot's next success records its end, but not held back (a restart is a fresh start)."""
    return JobFailures(job=job, count=count, error=error, retry_at=now, delay=0.0)


def held_back(failures: JobFailures | None, now: float) -> bool:
    """The slot starts no job until its backoff has passed."""
    return failures is not None and now < failures.retry_at


def error_text(exc: BaseException) -> str:
    """An exception in one line for people: its type and message, cut to ERROR_WIDTH."""
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 3] + "..."


def failed_message(key: SlotKey, f: JobFailures) -> str:
    """The `workload.job_failed` event's message."""
    times = "once" if f.count == 1 else f"{f.count} times in a row"
    return (
        f"{key[0]}/{key[1]}: workload job {f.job} failed {times}: {f.error}; "
        f"retrying in {f.delay:.0f}s"
    )
