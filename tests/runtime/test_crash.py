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
from collections.abc import Callable
from pathlib import Path

import pytest
from crash_support import CHAOS_POLICY, Chaos, check_invariants, counters, kill_rounds
from runtime_support import (
    SLOW,
    Control,
    Daemon,
    converged,
    ours,
    short,
    wait_for,
    write_config,
)

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


async def test_kill_9_at_random_moments_always_converges(
    tmp_path: Path, control: Control, daemons: Callable[[Path], Daemon]
) -> None:
    rng = random.Random(SEED)
    db = tmp_path / "state.db"
    config = write_config(tmp_path, control.emulator.url, policy=CHAOS_POLICY)
    chaos = Chaos(
        converged=lambda: converged(control, db, 3),
        break_things=lambda rng: _chaos(control, rng),
        capacity=control.capacity,
        stockout_p=0.25,
    )
    rounds = await kill_rounds(
        daemons, config, db, chaos, rng, rounds=ROUNDS, min_rounds=MIN_ROUNDS, budget_s=BUDGET_S
    )

    # One last restart: it converges too, and leaves nothing of ours behind.
    daemon = await daemons(config).start()
    await wait_for(lambda: converged(control, db, 3), SLOW, "convergence after the last kill")
    await daemon.kill()
    check_invariants(db)
    assert rounds >= MIN_ROUNDS
    assert counters(db)["nodes"] > 3 + rounds  # every round replaced at least one node
