"""Bounded retries of one API request, at the adapter edge.

Requests are retried here, at the edge of the REST client, and nowhere above it: each one gets
a bounded number of attempts, honours the server's Retry-After, and logs each failed attempt as
"attempt i/N" with the call's name, the error kind and the wait. Budgets across requests (when
to create again) are the planner's.

`call_with_retry` runs a request up to `RetryPolicy.max_attempts` times. It retries only the
kinds in `RetryPolicy.retry_kinds`:

- TRANSIENT: 5xx, timeouts, dropped connections, garbage bodies.
- RATE_LIMITED: 429 without a quota detail; clears within seconds.
- CONFLICT: 409 "unable to queue the operation" means another operation on the node is in
  flight; the field notes say to retry it. If it is still busy after the last attempt the
  planner gets CONFLICT and decides (budgets live there, not here).

CAPACITY, QUOTA, PERMISSION, NOT_FOUND, ALREADY_EXISTS and INVALID never clear within a
request's lifetime, so they surface at once. Only the request is retried, never a failed
long-running operation: whether to create again is the planner's call.

`RetryPolicy` is the adapters' one retry rule (`RetryRule`, core/model/retry.py) in this
client's knobs; the loop below only asks it. The delay before retry n (1-based) is "full
jitter": `rng() * min(cap, base * 2**(n-1))`, raised to the server's Retry-After when it asked
for longer. A Retry-After beyond `max_retry_after` is not slept through here: the error
surfaces with `retry_after` set, so the daemon's loop, not a request, does the long wait.
`sleep` and `rng` are injected so tests run the whole schedule without sleeping.

A caller's deadline (`ANSWER_BY`, ports/cloud.py) bounds the retries: a retry whose wait alone
would end past it is not started, and the error surfaces at once (the caller would cancel the
request anyway; the API is spared it).

Note: a retried POST may have reached the server the first time, so a create may answer
ALREADY_EXISTS for a node our own earlier attempt made; the planner adopts it by its labels.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from tpucared.core.model.backoff import in_seconds
from tpucared.core.model.retry import RetryRule
from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.errors import ApiError
from tpucared.ports.cloud import ANSWER_BY

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]
Rng = Callable[[], float]  # a draw in [0, 1), random.random; 1.0 gives the ceiling itself

log = structlog.get_logger(__name__)

RETRYABLE_KINDS = frozenset(
    {ErrorKind.TRANSIENT, ErrorKind.RATE_LIMITED, ErrorKind.CONFLICT, ErrorKind.MALFORMED}
)


class RetryPolicy(RetryRule[ErrorKind]):
    """The one retry rule (core/model/retry.py), spelt in the REST client's knobs: up to
    `max_attempts` requests, full-jitter backoff doubling from `base` up to `cap` seconds, a
    Retry-After beyond `max_retry_after` surfacing at once, `retry_kinds` retried."""

    def __init__(
        self,
        max_attempts: int = 6,  # total requests, the first one included
        base: float = 0.5,  # seconds; the ceiling of the first delay
        cap: float = 30.0,  # seconds; the ceiling of any jittered delay
        max_retry_after: float = 120.0,  # a longer server-requested wait surfaces instead
        retry_kinds: frozenset[ErrorKind] = RETRYABLE_KINDS,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if base < 0 or cap < 0 or max_retry_after < 0:
            raise ValueError("base, cap and max_retry_after must not be negative")
        super().__init__(
            attempts=max_attempts,
            waits=in_seconds(base, cap),
            retry_on=retry_kinds,
            max_retry_after=max_retry_after,
        )

    @property
    def max_attempts(self) -> int:
        assert self.attempts is not None
        return self.attempts

    @property
    def retry_kinds(self) -> frozenset[ErrorKind]:
        return self.retry_on

    def backoff(self, retry: int, rng: Rng) -> float:
        """Full-jitter delay before retry number `retry` (1-based), Retry-After aside."""
        return self.waits.delay(retry, rng())

    def delay(self, retry: int, error: ApiError, rng: Rng) -> float | None:
        """Seconds to wait before retry `retry` after `error`, or None to give up now."""
        return self.pause(error.kind, retry, rng, retry_after=error.retry_after)


NO_RETRY = RetryPolicy(max_attempts=1)


async def call_with_retry(
    request: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    sleep: Sleep = asyncio.sleep,
    rng: Rng = random.random,
    what: str = "request",
) -> T:
    """Run `request()` until it succeeds, fails for good, or the attempts run out.

    `what` names the call in the "attempt i/N" log lines (e.g. "nodes.list"). The error that
    finally surfaces carries `attempts`, the number of requests made.
    """
    attempt = 1
    while True:
        try:
            return await request()
        except ApiError as error:
            error.attempts = attempt
            delay = policy.delay(attempt, error, rng)
            if delay is None or _past_deadline(delay):
                raise
            log.warning(
                "api.retrying",
                call=what,
                attempt=f"{attempt}/{policy.max_attempts}",
                kind=error.kind.value,
                delay_s=round(delay, 3),
                retry_after_s=error.retry_after,
                error=str(error),
            )
            await sleep(delay)
            attempt += 1


def _past_deadline(delay: float) -> bool:
    """The caller's deadline (ANSWER_BY) comes before a retry after `delay` could even start."""
    deadline = ANSWER_BY.get()
    return deadline is not None and asyncio.get_running_loop().time() + delay >= deadline
