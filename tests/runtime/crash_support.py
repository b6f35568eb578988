"""The kill -9 rounds test_crash.py (TPU nodes) and test_crash_compute.py (Compute Engine VMs
and slices) share: start the daemon, wait for the fleet to converge, break things at random,
kill -9 the daemon in the middle, and check the database after every kill (the store tests'
invariants, counters that never go down)."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from runtime_support import REPO, SLOW, Daemon, query, wait_for

sys.path.insert(0, str(REPO / "tests" / "store"))
from store_support import check_invariants

# Short waits and backoffs, so a round converges within seconds of a restart.
CHAOS_POLICY = {
    "vanish_grace": "500ms",
    "capacity_backoff": "200ms",
    "capacity_backoff_cap": "500ms",
    "transient_backoff": "200ms",
    "transient_backoff_cap": "500ms",
}


def counters(db: Path) -> dict[str, int]:
    """What must never go down: each slot's preemptions and the rows of the append-only tables."""
    slots = query(db, "SELECT slot, preemptions FROM slots ORDER BY slot")
    out = {f"preemptions/{r['slot']}": r["preemptions"] for r in slots}
    for table in ("events", "create_attempts", "nodes"):
        out[table] = query(db, f"SELECT count(*) AS n FROM {table}")[0]["n"]
    return out


@dataclass
class Chaos:
    """One cloud's side of the rounds: when its fleet has converged, how to break it (given the
    round's random source), how to set the zone's capacity (None: unlimited), and how likely a
    round starts with a stockout; `after_convergence` checks more once it has converged."""

    converged: Callable[[], Awaitable[bool]]
    break_things: Callable[[random.Random], Awaitable[None]]
    capacity: Callable[[int | None], Awaitable[None]]
    stockout_p: float
    after_convergence: Callable[[], Awaitable[None]] | None = None


async def kill_rounds(
    daemons: Callable[[Path], Daemon],
    config: Path,
    db: Path,
    chaos: Chaos,
    rng: random.Random,
    *,
    rounds: int,
    min_rounds: int,
    budget_s: float,
) -> int:
    """Up to `rounds` rounds (no new one after `budget_s`, but always `min_rounds`): the number
    run. Every round converges, is broken and killed, and leaves a sound database."""
    started = time.monotonic()
    seen: dict[str, int] = {}
    done = 0
    while done < rounds and (done < min_rounds or time.monotonic() - started < budget_s):
        done += 1
        daemon = await daemons(config).start()
        await wait_for(chaos.converged, SLOW, f"convergence after restart {done}")
        if chaos.after_convergence is not None:
            await chaos.after_convergence()
        # Now break things, and kill the daemon somewhere in the middle of cleaning up.
        if rng.random() < chaos.stockout_p:
            await chaos.capacity(rng.choice([0, 1]))  # some recreates hit a stockout
        breaking = asyncio.create_task(chaos.break_things(rng))
        await asyncio.sleep(rng.uniform(0.05, 1.2))
        await daemon.kill()
        await breaking
        await chaos.capacity(None)

        check_invariants(db)
        now = counters(db)
        for key, value in seen.items():
            assert now.get(key, 0) >= value, f"round {done}: {key} went down"
        seen = now
    return done
