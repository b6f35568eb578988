"""kill -9 at random moments: the daemon is killed again and again while nodes are being
preempted, terminated, vanished, deleted and created; after every restart the fleet converges
to exactly `size` READY nodes of ours, each the live incarnation of its slot (no leak, no
duplicate), counters never go down, and the database's invariants hold after every kill
(the store tests' own checker: legal phase paths, counters agreeing with events, one live
incarnation per slot, integrity)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import (
    REPO,
    SLOW,
    Control,
    Daemon,
    converged,
    ours,
    query,
    short,
    wait_for,
    write_config,
)

sys.path.insert(0, str(REPO / "tests" / "store"))
from store_support import check_invariants

pytestmark = pytest.mark.slow

SEED = 20251121
ROUNDS = 12
MIN_ROUNDS = 8
BUDGET_S = 35.0  # no new round after this (a loaded machine), but always MIN_ROUNDS


async def _chaos(control: Control, rng: random.Random) -> None:
    """Kill some of our READY nodes, each in its own way, at random moments."""
    nodes = [n for n in ours(await control.nodes()) if n["state"] == "READY"]
    for node in rng.sample(nodes, k=rng.randint(1, len(nodes))):
        action = rng.choice(["preempt", "terminate", "vanish"])
        with contextlib.suppress(AssertionError):  # it may have changed state meanwhile
            await control.node_action(short(node), action)
        await asyncio.sleep(rng.uniform(0.0, 0.3))


def _counters(db: Path) -> dict[str, int]:
    slots = query(db, "SELECT slot, preemptions FROM slots ORDER BY slot")
    out = {f"preemptions/{r['slot']}": r["preemptions"] for r in slots}
    for table in ("events", "create_attempts", "nodes"):
        out[table] = query(db, f"SELECT count(*) AS n FROM {table}")[0]["n"]
    return out


async def test_kill_9_at_random_moments_always_converges(
    tmp_path: Path, control: Control, daemons: Callable[[Path], Daemon]
) -> None:
    rng = random.Random(SEED)
    db = tmp_path / "state.db"
    config = write_config(
        tmp_path,
        control.emulator.url,
        policy={
            "vanish_grace": "500ms",
            "capacity_backoff": "200ms",
            "capacity_backoff_cap": "500ms",
            "transient_backoff": "200ms",
            "transient_backoff_cap": "500ms",
        },
    )
    started = time.monotonic()
    seen: dict[str, int] = {}
    rounds = 0
    while rounds < ROUNDS and (rounds < MIN_ROUNDS or time.monotonic() - started < BUDGET_S):
        rounds += 1
        daemon = await daemons(config).start()
        await wait_for(
            lambda: converged(control, db, 3), SLOW, f"convergence after restart {rounds}"
        )
        # Now break things, and kill the daemon somewhere in the middle of cleaning up.
        if rng.random() < 0.25:
            await control.capacity(rng.choice([0, 1]))  # some recreates hit a stockout
        chaos = asyncio.create_task(_chaos(control, rng))
        await asyncio.sleep(rng.uniform(0.05, 1.2))
        await daemon.kill()
        await chaos
        await control.capacity(None)

        check_invariants(db)
        now = _counters(db)
        for key, value in seen.items():
            assert now.get(key, 0) >= value, f"round {rounds}: {key} went down"
        seen = now

    # One last restart: it converges too, and leaves nothing of ours behind.
    daemon = await daemons(config).start()
    await wait_for(lambda: converged(control, db, 3), SLOW, "convergence after the last kill")
    await daemon.kill()
    check_invariants(db)
    assert rounds >= MIN_ROUNDS
    assert _counters(db)["nodes"] > 3 + rounds  # every round replaced at least one node
