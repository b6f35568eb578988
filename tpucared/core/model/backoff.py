"""The one backoff rule of the daemon: capped exponential growth with a jittered share.

Owns `Backoff`, the rule every retry schedule of tpucared is built from, and its pure
arithmetic: `ceiling()` grows by `factor` per attempt up to `cap`, `delay()` picks a point in
the attempt's window from a number `u` the caller supplies. Nothing here draws a random number,
reads a clock or sleeps: those stay with the callers, which are:

- the planner, whose rules hold `timedelta`s (`BackoffRule`): when a slot may create again
  (`SlotRecord.next_create_at`, core/nodes/create_backoff.py), when a failing delete is issued
  again, when a crashed workload is relaunched (core/workload/planner.py), with the rule
  `core/vocab/policy.py` picks for the error. Its `u` comes from `jitter()`, derived from
  stable facts (fleet, slot, run id, attempt), so a plan is deterministic for the same inputs
  and `tpucared plan` shows exactly what the daemon would do, while different slots still
  spread out their retries;
- the adapters, whose rules hold seconds as floats (`Backoff[float]`, built with
  `in_seconds()`): the REST client's retries of one request (gcp/retry.py), the SSH fan-out's
  retries on one worker (ssh/retry.py), and how often an operation in flight is polled
  (runtime/nodes/operations.py). They draw `u` from `random` themselves and keep their own
  loops and sleeping; the retries of one request (REST, SSH, webhook posts) decide through
  the one retry rule built on this one, `RetryRule` (core/model/retry.py).

How much of a wait is random is the rule's `jitter`, a share of the ceiling. By default the
random share lies below the ceiling: 1.0 is full jitter (uniform in [0, ceiling]: best at
spreading many clients that fail together, the transient and error backoffs, the REST
retries), a smaller share keeps the wait near the ceiling. Capacity hunting uses a small share
(docs/daemon.md, "API requests"): a lone slot's expected wait for capacity that comes back at
a random moment is E[C^2] / 2E[C] over its retry cycle C, so a near-constant cycle gives the
shortest wait for a given number of requests, and the share that stays random still keeps
slots from retrying in step. A `centred` rule spreads the share around the ceiling instead,
`ceiling * (1 +- jitter)`, as the SSH retries do so that a slice's workers do not reconnect in
lock-step.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeAlias, TypeVar

# A rule's durations: timedelta in the planner, seconds (float) at the adapters' edge. A rule
# computes in the type it was given, so each caller gets exactly the arithmetic it always had.
Span = TypeVar("Span", timedelta, float)


@dataclass(frozen=True, init=False)
class Backoff(Generic[Span]):
    """delay(n) is uniform in [max(floor, (1 - jitter) * c), c], c = min(cap, base * factor**(n-1)).

    jitter = 1 is full jitter above the floor; jitter = 0 waits exactly the ceiling. A `centred`
    rule's window is [max(floor, (1 - jitter) * c), (1 + jitter) * c] instead. base = cap = 0 is
    the rule that never waits.
    """

    base: Span  # the ceiling of the first delay
    cap: Span  # the largest ceiling
    floor: Span  # no delay is shorter, whatever the jitter
    jitter: float  # the random share of the ceiling, in [0, 1]
    factor: float  # the ceiling's growth per attempt, at least 1
    centred: bool  # the random share spreads around the ceiling, not below it

    def __init__(
        self,
        base: Span,
        cap: Span,
        floor: Span | None = None,
        jitter: float = 1.0,
        *,
        factor: float = 2.0,
        centred: bool = False,
    ) -> None:
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "cap", cap)
        object.__setattr__(self, "floor", _zero(base) if floor is None else floor)
        object.__setattr__(self, "jitter", jitter)
        object.__setattr__(self, "factor", factor)
        object.__setattr__(self, "centred", centred)
        self._check()

    def _check(self) -> None:
        zero = _zero(self.base)
        never_waits = self.base == zero and self.cap == zero
        if (self.base <= zero and not never_waits) or self.cap < self.base or self.floor < zero:
            raise ValueError(f"bad backoff rule: {self}")
        if self.floor > self.cap:
            raise ValueError(f"backoff floor above its cap: {self}")
        if not (math.isfinite(self.jitter) and 0.0 <= self.jitter <= 1.0):
            raise ValueError(f"backoff jitter must be in [0, 1]: {self}")
        if not self.factor >= 1.0:
            raise ValueError(f"backoff factor must be at least 1: {self}")

    def ceiling(self, attempt: int) -> Span:
        """The delay's reference for the `attempt`-th consecutive failure (1-based): the
        largest delay, or for a centred rule the middle of its window."""
        exponent = max(attempt, 1) - 1
        try:
            growth = self.factor**exponent
        except OverflowError:  # far beyond any cap
            growth = math.inf
        # The cap first: a never-waiting rule's 0 * inf is NaN, and min() keeps the cap then.
        return _like(self.base, min(_seconds(self.cap), _seconds(self.base) * growth))

    def shortest(self, attempt: int) -> Span:
        """The smallest delay for the `attempt`-th consecutive failure: the jitter's low end."""
        return max(self.floor, self.ceiling(attempt) * (1.0 - self.jitter))

    def delay(self, attempt: int, u: float) -> Span:
        """The delay before retrying after the `attempt`-th consecutive failure.

        `u` in [0, 1] picks the point in the attempt's window, from its low end (0) to its top
        (1); callers draw it from [0, 1). Spreading retries over that window is what keeps many
        clients from hammering a server in step.
        """
        if not 0.0 <= u <= 1.0:
            raise ValueError(f"jitter must be in [0, 1], got {u}")
        top = self.ceiling(attempt)
        if self.centred:
            # The same arithmetic as random.uniform(-1, 1) fed with u.
            return max(self.floor, top * (1.0 + self.jitter * (-1.0 + 2.0 * u)))
        low = self.shortest(attempt)
        span = max(top - low, _zero(top))
        return low + span * u


# The planner's rules: durations as timedelta.
BackoffRule: TypeAlias = Backoff[timedelta]


def in_seconds(
    base: float,
    cap: float,
    *,
    factor: float = 2.0,
    jitter: float = 1.0,
    centred: bool = False,
) -> Backoff[float]:
    """The rule of an adapter's knobs, in seconds.

    Adapters accept knobs a rule does not, with the same delays: a cap below the base (every
    ceiling is the cap, as with base = cap) and a zero base or cap (no wait at all).
    """
    first = min(base, cap)
    return Backoff(first, cap if first > 0 else 0.0, jitter=jitter, factor=factor, centred=centred)


def ceiling(rule: Backoff[Span], attempt: int) -> Span:
    """The largest delay for the `attempt`-th consecutive failure (1-based)."""
    return rule.ceiling(attempt)


def shortest(rule: Backoff[Span], attempt: int) -> Span:
    """The smallest delay for the `attempt`-th consecutive failure: the jitter's low end."""
    return rule.shortest(attempt)


def delay(rule: Backoff[Span], attempt: int, u: float) -> Span:
    """The planner's delay before retrying after the `attempt`-th consecutive failure.

    `u` is a draw of `jitter()`, in [0, 1): it picks the point between `shortest()` and
    `ceiling()`, which spreads the retries of many slots over that window.
    """
    if not 0.0 <= u < 1.0:
        raise ValueError(f"jitter must be in [0, 1), got {u}")
    return rule.delay(attempt, u)


def jitter(*parts: object) -> float:
    """A stable pseudo-random number in [0, 1) derived from `parts` (their str forms)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _seconds(span: timedelta | float) -> float:
    return span.total_seconds() if isinstance(span, timedelta) else span


def _like(kind: Span, seconds: float) -> Span:
    """`seconds` as a span of the same type as `kind`."""
    if isinstance(kind, timedelta):
        return timedelta(seconds=seconds)
    return seconds


def _zero(kind: Span) -> Span:
    return _like(kind, 0.0)
