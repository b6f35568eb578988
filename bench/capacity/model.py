"""The model: the daemon's hunting cycle, simulated (docs/daemon.md's trade-off table,
`python -m bench.capacity --model`)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from bench import common
from bench.capacity.settings import MODELLED_DEFAULT, POLL, PREVIOUS_DEFAULT, SECOND
from tpucared.core.model.backoff import BackoffRule, delay


def poll_times(op_seconds: float, poll: float) -> list[float]:
    """When the operation watcher polls an operation (runtime/nodes/operations.py PollSchedule:
    0.5 s, then doubling, at most min(5 s, poll) apart), up to the poll that sees it done."""
    interval = min(0.5, poll / 2)
    times = [interval]
    while times[-1] < op_seconds:
        interval = min(min(5.0, poll), interval * 2)
        times.append(times[-1] + interval)
    return times


def simulate(
    rule: BackoffRule | None,
    *,
    slots: int,
    runs: int,
    seed: int = 1,
    op_seconds: float = 2.0,
    poll: float = POLL,
    stockout: float = 300.0,
    count_from: float = 30.0,
    tick_seconds: float = 0.03,
    max_in_flight: int = 4,
    list_when_hold_lifts: bool = True,
) -> dict[str, float]:
    """Simulate `runs` stockouts of one fleet of `slots` hunting one zone.

    The daemon as docs/daemon.md describes it: a create's failing operation is noticed at
    the first poll after it ends; that wakes a tick (one list), which sets the slot's next
    create `delay(rule, failures)` later; the loop wakes for it (+20 ms) and that tick (one
    more list) sends the create; ticks are at least min(1 s, poll/10) apart and at most
    `poll` apart; at most `max_in_flight` creates in flight. The slots start hunting
    together at a uniform point of a poll (when their preemption is noticed). Capacity
    returns at `stockout`; latency is until the first create after it. Requests are counted
    from `count_from` to `stockout`. `rule=None` retries in the tick that sees the failure.
    `list_when_hold_lifts=False` models a loop that skips the list in a tick woken only by a
    backoff ending (the zone was listed one wait ago, when the failure was seen).
    """
    rng = random.Random(seed)
    polls = poll_times(op_seconds, poll)
    notice = polls[-1] + 0.005
    min_gap = min(1.0, poll / 10)
    latencies: list[float] = []
    rates: list[float] = []
    for _ in range(runs):
        next_at = [rng.uniform(0, poll) + 1.5] * slots  # preemption seen, node deleted
        pending: list[float | None] = [None] * slots  # when a failure will be noticed
        failures = [0] * slots
        counted = 0
        tick = min(next_at)
        first: float | None = None
        hold_only = False  # this tick was woken by a backoff ending and nothing else
        while first is None:
            if list_when_hold_lifts or not hold_only:
                counted += count_from <= tick < stockout  # this tick's list
            for i in range(slots):
                seen = pending[i]
                if seen is not None and seen <= tick:
                    failures[i] += 1
                    u = rng.random()
                    wait = 0.0 if rule is None else delay(rule, failures[i], u).total_seconds()
                    next_at[i] = tick + wait
                    pending[i] = None
            in_flight = sum(p is not None for p in pending)
            for i in range(slots):
                if pending[i] is None and next_at[i] <= tick and in_flight < max_in_flight:
                    sent = tick + tick_seconds
                    if sent >= stockout:
                        first = sent
                        break
                    counted += count_from <= sent < stockout
                    counted += sum(count_from <= sent + t < stockout for t in polls)
                    pending[i] = sent + notice
                    next_at[i] = math.inf
                    in_flight += 1
            if first is not None:
                break
            others = [tick + poll, *(p for p in pending if p is not None)]
            holds = [t + 0.02 for t in next_at if t != math.inf]
            hold_only = bool(holds) and min(holds) < min(others)
            tick = max(min(others + holds), tick + min_gap, tick + tick_seconds)
        latencies.append(first - stockout)
        rates.append(counted / ((stockout - count_from) / 60.0))
    return {
        "median": round(common.percentile(latencies, 50), 2),
        "p99": round(common.percentile(latencies, 99), 2),
        "mean": round(sum(latencies) / len(latencies), 2),
        "requests_per_minute": round(sum(rates) / len(rates), 1),
    }


MODEL_ROWS: tuple[tuple[str, BackoffRule | None], ...] = (
    ("previous default: 5 s doubling to 30 s, full jitter", PREVIOUS_DEFAULT),
    ("5 s doubling to 15 s, full jitter", BackoffRule(base=5 * SECOND, cap=15 * SECOND)),
    ("5 s doubling to 10 s, full jitter", BackoffRule(base=5 * SECOND, cap=10 * SECOND)),
    ("4 s, full jitter (0-4 s)", BackoffRule(base=4 * SECOND, cap=4 * SECOND)),
    ("6 s, 40 % jittered (3.6-6 s)", BackoffRule(base=6 * SECOND, cap=6 * SECOND, jitter=0.4)),
    ("5 s, 40 % jittered (3-5 s)", BackoffRule(base=5 * SECOND, cap=5 * SECOND, jitter=0.4)),
    ("4 s, 40 % jittered (2.4-4 s): the default then", MODELLED_DEFAULT),
    ("3 s, 40 % jittered (1.8-3 s)", BackoffRule(base=3 * SECOND, cap=3 * SECOND, jitter=0.4)),
    ("no wait (tight loop)", None),
)


def model_table(
    runs: int = 1000, rows: Sequence[tuple[str, BackoffRule | None]] = MODEL_ROWS
) -> str:
    lines = [
        "| capacity wait | 1 slot: median / p99 | requests/min (1 slot) "
        "| 4 slots: median / p99 | requests/min (4 slots, one zone) |",
        "|---|---|---:|---|---:|",
    ]
    for label, rule in rows:
        one = simulate(rule, slots=1, runs=runs)
        four = simulate(rule, slots=4, runs=runs)
        lines.append(
            f"| {label} | {one['median']:.1f} s / {one['p99']:.1f} s "
            f"| {one['requests_per_minute']:.0f} "
            f"| {four['median']:.1f} s / {four['p99']:.1f} s "
            f"| {four['requests_per_minute']:.0f} |"
        )
    return "\n".join(lines)


def lone_slot_floor(
    requests_per_minute: float, *, per_cycle: int = 2, fixed_per_minute: float = 6.0
) -> dict[str, float]:
    """The least cycle and mean wait of a lone slot hunting with plain creates at a given
    request rate (docs/daemon.md, "the lone slot's limit"). Each cycle costs at least
    `per_cycle` requests (a create and one read of its operation) beside the poll's lists
    (`fixed_per_minute`: one nodes.list every 10 s); so the cycle C is at least
    60 * per_cycle / (rate - fixed) seconds. Capacity comes back at a moment unrelated to the
    cycle, so the mean wait for the next create (capacity judged at the post) or the next
    create's end (judged at the end) is E[C^2] / 2E[C] >= E[C] / 2, equal for a constant C."""
    cycle = 60.0 * per_cycle / (requests_per_minute - fixed_per_minute)
    return {"cycle_s": round(cycle, 2), "mean_wait_s": round(cycle / 2, 2)}
