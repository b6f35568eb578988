"""Capped exponential backoff with a jittered share, as pure arithmetic.

The planner decides when a slot may create again (`SlotRecord.next_create_at`) and when a
failing delete is issued again; both use `delay()`, with the rule `core/planning/policy.py` picks
for the error. The random part comes in as a number `u` in [0, 1): the planner derives it with
`jitter()` from stable facts (fleet, slot, run id, attempt), so a plan is deterministic for
the same inputs and `tpucared plan` shows exactly what the daemon would do, while different
slots still spread out their retries.

How much of a wait is random is the rule's `jitter`, a share of the ceiling: 1.0 is full
jitter (uniform in [0, ceiling]: best at spreading many clients that fail together, the
transient and error backoffs), a smaller share keeps the wait near the ceiling. Capacity
hunting uses a small share (docs/daemon.md, "API requests"): a lone slot's expected wait for
capacity that comes back at a random moment is E[C^2] / 2E[C] over its retry cycle C, so a
near-constant cycle gives the shortest wait for a given number of requests, and the share that
stays random still keeps slots from retrying in step.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import timedelta

# 2**62 seconds is far beyond any cap; clamping the exponent keeps float math finite.
_MAX_EXPONENT = 62


@dataclass(frozen=True)
class BackoffRule:
    """delay(n) is uniform in [max(floor, (1 - jitter) * c), c], c = min(cap, base * 2**(n-1)).

    jitter = 1 is full jitter above the floor; jitter = 0 waits exactly the ceiling.
    """

    base: timedelta
    cap: timedelta
    floor: timedelta = timedelta(0)
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if self.base <= timedelta(0) or self.cap < self.base or self.floor < timedelta(0):
            raise ValueError(f"bad backoff rule: {self}")
        if self.floor > self.cap:
            raise ValueError(f"backoff floor above its cap: {self}")
        if not (math.isfinite(self.jitter) and 0.0 <= self.jitter <= 1.0):
            raise ValueError(f"backoff jitter must be in [0, 1]: {self}")


def ceiling(rule: BackoffRule, attempt: int) -> timedelta:
    """The largest delay for the `attempt`-th consecutive failure (1-based)."""
    exponent = min(max(attempt, 1) - 1, _MAX_EXPONENT)
    seconds = min(rule.cap.total_seconds(), rule.base.total_seconds() * 2.0**exponent)
    return timedelta(seconds=seconds)


def shortest(rule: BackoffRule, attempt: int) -> timedelta:
    """The smallest delay for the `attempt`-th consecutive failure: the jitter's low end."""
    top = ceiling(rule, attempt)
    return max(rule.floor, top * (1.0 - rule.jitter))


def delay(rule: BackoffRule, attempt: int, u: float) -> timedelta:
    """The delay before retrying after the `attempt`-th consecutive failure.

    `u` in [0, 1) picks the point between `shortest()` and `ceiling()`: spreading retries
    over that window is what keeps many slots from hammering the API in step.
    """
    if not 0.0 <= u < 1.0:
        raise ValueError(f"jitter must be in [0, 1), got {u}")
    top = ceiling(rule, attempt)
    low = shortest(rule, attempt)
    span = max(top - low, timedelta(0))
    return low + span * u


def jitter(*parts: object) -> float:
    """A stable pseudo-random number in [0, 1) derived from `parts` (their str forms)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64
