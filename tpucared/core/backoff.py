"""Capped exponential backoff with full jitter, as pure arithmetic.

The planner decides when a slot may create again (`SlotRecord.next_create_at`) and when a
failing delete is issued again; both use `delay()`. The random part comes in as a number
`u` in [0, 1): the planner derives it with `jitter()` from stable facts (fleet, slot, run id,
attempt), so a plan is deterministic for the same inputs and `tpucared plan` shows exactly
what the daemon would do, while different slots still spread out their retries.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta

# 2**62 seconds is far beyond any cap; clamping the exponent keeps float math finite.
_MAX_EXPONENT = 62


@dataclass(frozen=True)
class BackoffRule:
    """delay(n) is uniform in [floor, min(cap, base * 2**(n-1))] (full jitter above a floor)."""

    base: timedelta
    cap: timedelta
    floor: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        if self.base <= timedelta(0) or self.cap < self.base or self.floor < timedelta(0):
            raise ValueError(f"bad backoff rule: {self}")
        if self.floor > self.cap:
            raise ValueError(f"backoff floor above its cap: {self}")


def ceiling(rule: BackoffRule, attempt: int) -> timedelta:
    """The largest delay for the `attempt`-th consecutive failure (1-based)."""
    exponent = min(max(attempt, 1) - 1, _MAX_EXPONENT)
    seconds = min(rule.cap.total_seconds(), rule.base.total_seconds() * 2.0**exponent)
    return timedelta(seconds=seconds)


def delay(rule: BackoffRule, attempt: int, u: float) -> timedelta:
    """The delay before retrying after the `attempt`-th consecutive failure.

    `u` in [0, 1) picks the point between the floor and the ceiling (full jitter): spreading
    retries over the whole window is what keeps many slots from hammering the API in step.
    """
    if not 0.0 <= u < 1.0:
        raise ValueError(f"jitter must be in [0, 1), got {u}")
    top = ceiling(rule, attempt)
    span = max(top - rule.floor, timedelta(0))
    return rule.floor + span * u


def jitter(*parts: object) -> float:
    """A stable pseudo-random number in [0, 1) derived from `parts` (their str forms)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64
