"""The rules for a slot's failed background jobs (core/workload/job_failures.py): the streak
grows, its waits follow the core backoff within the rule's window and are reproducible, a
restored streak holds nothing back, and errors are one bounded line."""

from __future__ import annotations

from tpucared.core.workload.job_failures import (
    ERROR_WIDTH,
    JOB_RETRY,
    JobFailures,
    error_text,
    failed,
    failed_message,
    held_back,
    restored,
)

KEY = ("sweep", 3)


def test_a_streak_backs_off_within_the_rule_and_is_reproducible() -> None:
    streak: JobFailures | None = None
    delays = []
    for n in range(1, 12):
        streak = failed(streak, KEY, "probe", "OSError: x", now=100.0)
        assert streak.count == n
        assert JOB_RETRY.shortest(n) <= streak.delay <= JOB_RETRY.ceiling(n)
        assert streak.retry_at == 100.0 + streak.delay
        delays.append(streak.delay)
    assert max(delays) <= 300.0  # capped
    again: JobFailures | None = None
    for delay in delays:  # the same slot and streak: the same waits
        again = failed(again, KEY, "probe", "other", now=100.0)
        assert again.delay == delay
    assert streak is not None
    assert held_back(streak, 100.0)
    assert not held_back(streak, streak.retry_at)
    assert not held_back(None, 0.0)


def test_slots_failing_together_do_not_retry_in_step() -> None:
    delays = {failed(None, ("sweep", i), "launch", "e", 0.0).delay for i in range(20)}
    assert len(delays) > 10


def test_a_restored_streak_holds_nothing_back() -> None:
    streak = restored("launch", 4, "RuntimeError: boom", now=50.0)
    assert streak.count == 4
    assert not held_back(streak, 50.0)
    assert failed(streak, KEY, "launch", "e", 50.0).count == 5


def test_errors_are_one_bounded_line() -> None:
    assert error_text(RuntimeError("a\nb   c")) == "RuntimeError: a b c"
    assert error_text(TimeoutError()) == "TimeoutError"
    assert len(error_text(ValueError("x" * 1000))) == ERROR_WIDTH
    once = failed(None, KEY, "probe", "OSError: x", 0.0)
    assert failed_message(KEY, once).startswith("sweep/3: workload job probe failed once: OSError")
