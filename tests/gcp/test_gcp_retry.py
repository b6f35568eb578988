"""The retry schedule: full jitter, cap, Retry-After floor, which kinds retry, "attempt i/N"."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.errors import ApiError
from tpucared.gcp.retry import RetryPolicy, call_with_retry
from tpucared.ports.cloud import ANSWER_BY


class Recorder:
    """An injected sleep that records the delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def failing(*errors: ApiError, then: str = "ok") -> tuple[Callable[[], Awaitable[str]], list[int]]:
    """A request that raises `errors` in turn, then returns `then`; counts its calls."""
    calls = [0]

    async def request() -> str:
        calls[0] += 1
        if calls[0] <= len(errors):
            raise errors[calls[0] - 1]
        return then

    return request, calls


def err(kind: ErrorKind, retry_after: float | None = None) -> ApiError:
    return ApiError.of(kind, f"{kind} happened", retry_after=retry_after)


async def test_exponential_schedule_then_transient_surfaces() -> None:
    sleep = Recorder()
    request, calls = failing(*[err(ErrorKind.TRANSIENT)] * 10)
    with capture_logs() as logs, pytest.raises(ApiError) as caught:
        await call_with_retry(
            request, policy=RetryPolicy(), sleep=sleep, rng=lambda: 1.0, what="nodes.list"
        )
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert caught.value.attempts == 6
    assert calls[0] == 6
    assert sleep.delays == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert [entry["attempt"] for entry in logs] == ["1/6", "2/6", "3/6", "4/6", "5/6"]
    assert all(entry["call"] == "nodes.list" for entry in logs)
    assert all(entry["log_level"] == "warning" for entry in logs)


async def test_delays_are_capped_and_fully_jittered() -> None:
    sleep = Recorder()
    request, _ = failing(*[err(ErrorKind.TRANSIENT)] * 5)
    policy = RetryPolicy(max_attempts=6, base=1.0, cap=3.0)
    assert await call_with_retry(request, policy=policy, sleep=sleep, rng=lambda: 0.5) == "ok"
    assert sleep.delays == [0.5, 1.0, 1.5, 1.5, 1.5]


async def test_retry_after_is_a_floor() -> None:
    sleep = Recorder()
    request, calls = failing(err(ErrorKind.RATE_LIMITED, retry_after=5.0))
    result = await call_with_retry(request, policy=RetryPolicy(), sleep=sleep, rng=lambda: 0.0)
    assert result == "ok"
    assert calls[0] == 2
    assert sleep.delays == [5.0]


async def test_jitter_above_retry_after_is_kept() -> None:
    sleep = Recorder()
    policy = RetryPolicy(base=10.0)
    request, _ = failing(err(ErrorKind.TRANSIENT, retry_after=1.0))
    await call_with_retry(request, policy=policy, sleep=sleep, rng=lambda: 0.9)
    assert sleep.delays == [9.0]


async def test_retry_after_beyond_the_limit_surfaces_at_once() -> None:
    sleep = Recorder()
    request, calls = failing(err(ErrorKind.RATE_LIMITED, retry_after=3600.0))
    with pytest.raises(ApiError) as caught:
        await call_with_retry(request, policy=RetryPolicy(), sleep=sleep, rng=lambda: 0.5)
    assert caught.value.retry_after == 3600.0
    assert calls[0] == 1
    assert sleep.delays == []


@pytest.mark.parametrize(
    "kind",
    [
        ErrorKind.CAPACITY,
        ErrorKind.QUOTA,
        ErrorKind.PERMISSION,
        ErrorKind.NOT_FOUND,
        ErrorKind.ALREADY_EXISTS,
        ErrorKind.INVALID,
    ],
)
async def test_permanent_kinds_are_not_retried(kind: ErrorKind) -> None:
    sleep = Recorder()
    request, calls = failing(err(kind))
    with pytest.raises(ApiError) as caught:
        await call_with_retry(request, policy=RetryPolicy(), sleep=sleep, rng=lambda: 0.5)
    assert caught.value.kind is kind
    assert caught.value.attempts == 1
    assert calls[0] == 1
    assert sleep.delays == []


@pytest.mark.parametrize("kind", [ErrorKind.TRANSIENT, ErrorKind.RATE_LIMITED, ErrorKind.CONFLICT])
async def test_retryable_kinds_recover(kind: ErrorKind) -> None:
    sleep = Recorder()
    request, calls = failing(err(kind), err(kind), then="done")
    result = await call_with_retry(request, policy=RetryPolicy(), sleep=sleep, rng=lambda: 0.5)
    assert result == "done"
    assert calls[0] == 3
    assert sleep.delays == [0.25, 0.5]


async def test_single_attempt_policy_never_sleeps() -> None:
    sleep = Recorder()
    request, calls = failing(err(ErrorKind.TRANSIENT))
    with pytest.raises(ApiError):
        await call_with_retry(request, policy=RetryPolicy(max_attempts=1), sleep=sleep)
    assert (calls[0], sleep.delays) == (1, [])


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="negative"):
        RetryPolicy(base=-1)


@given(
    retry=st.integers(min_value=1, max_value=60),
    draw=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
    base=st.floats(min_value=0.0, max_value=10.0),
    cap=st.floats(min_value=0.0, max_value=100.0),
)
def test_backoff_stays_within_its_ceiling(retry: int, draw: float, base: float, cap: float) -> None:
    delay = RetryPolicy(base=base, cap=cap).backoff(retry, lambda: draw)
    assert 0.0 <= delay <= min(cap, base * 2.0 ** (retry - 1))


async def test_a_retry_that_cannot_start_before_the_callers_deadline_is_not_made() -> None:
    """ANSWER_BY (ports/cloud.py): the first retry's wait would end past the deadline, so the
    error surfaces after one request instead of a request the caller would only cancel."""
    request, calls = failing(err(ErrorKind.TRANSIENT), err(ErrorKind.TRANSIENT))
    sleep = Recorder()
    loop = asyncio.get_running_loop()
    token = ANSWER_BY.set(loop.time() + 0.25)
    try:
        with pytest.raises(ApiError) as raised:
            await call_with_retry(
                request, policy=RetryPolicy(base=1.0), sleep=sleep, rng=lambda: 0.5
            )
    finally:
        ANSWER_BY.reset(token)
    assert (calls[0], sleep.delays, raised.value.attempts) == (1, [], 1)
    # Without a deadline the same schedule retries.
    request, calls = failing(err(ErrorKind.TRANSIENT))
    assert (
        await call_with_retry(request, policy=RetryPolicy(base=1.0), sleep=sleep, rng=lambda: 0.5)
        == "ok"
    )
    assert (calls[0], sleep.delays) == (2, [0.5])
