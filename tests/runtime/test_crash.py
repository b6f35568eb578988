"""kill -9 at random moments: the daemon is killed again and again while nodes are being
preempted, terminated, vanished, deleted and created; after every restart the fleet converges
to exactly `size` READY nodes of ours, each the live incarnation of its slot (no leak, no
duplicate), counters never go down, and the database's invariants hold after every kill
(the store tests' own checker: legal phase paths, counters agreeing with events, one live
incarnation per slot, integrity). The same for a Compute Engine fleet (`api = "compute"`),
whose spot VMs are preempted (STOP: TERMINATED until deleted), terminated and vanished: no
VM leaked (a TERMINATED one left behind) or made twice, fewer rounds."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from runtime_support import (
    MACHINE,
    REPO,
    SLOW,
    Control,
    Daemon,
    compute_converged,
    compute_fleet,
    compute_instances,
    converged,
    ours,
    query,
    short,
    wait_for,
    write_config,
)

from bench import daemon_config
from bench.daemon_config import PROJECT, ZONE

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


POLICY = {
    "vanish_grace": "500ms",
    "capacity_backoff": "200ms",
    "capacity_backoff_cap": "500ms",
    "transient_backoff": "200ms",
    "transient_backoff_cap": "500ms",
}


async def _kill_9_rounds(
    daemons: Callable[[Path], Daemon],
    config: Path,
    db: Path,
    fleet_converged: Callable[[], Awaitable[bool]],
    chaos: Callable[[random.Random], Awaitable[None]],
    capacity: Callable[[int | None], Awaitable[None]],
    rounds_wanted: tuple[int, int, float],
) -> int:
    """Start, converge, break things, kill -9 somewhere in the middle of cleaning up; check
    the database after every kill; return the rounds run. `rounds_wanted`: (at most, at
    least, no new round after this many seconds)."""
    most, least, budget = rounds_wanted
    rng = random.Random(SEED)
    started = time.monotonic()
    seen: dict[str, int] = {}
    rounds = 0
    while rounds < most and (rounds < least or time.monotonic() - started < budget):
        rounds += 1
        daemon = await daemons(config).start()
        await wait_for(fleet_converged, SLOW, f"convergence after restart {rounds}")
        if rng.random() < 0.25:
            await capacity(rng.choice([0, 1]))  # some recreates hit a stockout
        breaking = asyncio.create_task(chaos(rng))
        await asyncio.sleep(rng.uniform(0.05, 1.2))
        await daemon.kill()
        await breaking
        await capacity(None)

        check_invariants(db)
        now = _counters(db)
        for key, value in seen.items():
            assert now.get(key, 0) >= value, f"round {rounds}: {key} went down"
        seen = now

    # One last restart: it converges too, and leaves nothing of ours behind.
    daemon = await daemons(config).start()
    await wait_for(fleet_converged, SLOW, "convergence after the last kill")
    await daemon.kill()
    check_invariants(db)
    return rounds


async def test_kill_9_at_random_moments_always_converges(
    tmp_path: Path, control: Control, daemons: Callable[[Path], Daemon]
) -> None:
    db = tmp_path / "state.db"
    config = write_config(tmp_path, control.emulator.url, policy=POLICY)
    rounds = await _kill_9_rounds(
        daemons, config, db,
        lambda: converged(control, db, 3),
        lambda rng: _chaos(control, rng),
        control.capacity,
        (ROUNDS, MIN_ROUNDS, BUDGET_S),
    )  # fmt: skip
    assert rounds >= MIN_ROUNDS
    assert _counters(db)["nodes"] > 3 + rounds  # every round replaced at least one node


# ---------------------------------------------------------------------------------------------
# A Compute Engine fleet: spot TPU7x VMs, one instance per slot.

IRON = 2  # the compute fleet's size: lean, the TPU API test above covers the rest


async def _compute_chaos(control: Control, rng: random.Random) -> None:
    running = [i for i in await compute_instances(control, "iron") if i["status"] == "RUNNING"]
    for inst in rng.sample(running, k=rng.randint(1, len(running))):
        action = rng.choice(["preempt", "terminate", "vanish"])
        path = f"/projects/{PROJECT}/zones/{ZONE}/instances/{inst['name']}:{action}"
        with contextlib.suppress(AssertionError):  # it may have changed state meanwhile
            await control._call("POST", path)
        await asyncio.sleep(rng.uniform(0.0, 0.3))


async def test_kill_9_with_a_compute_fleet_leaks_no_vm_and_makes_none_twice(
    tmp_path: Path, control: Control, daemons: Callable[[Path], Daemon]
) -> None:
    db = tmp_path / "state.db"
    fleet = compute_fleet("iron", IRON)
    text = daemon_config.against_emulator(control.emulator.url, fleet, policy=POLICY)
    config = daemon_config.write(tmp_path / "fleet.toml", text)

    async def capacity(available: int | None) -> None:
        body = {"zone": ZONE, "machine_type": MACHINE, "available": available}
        await control._call("PUT", "/capacity", body)

    rounds = await _kill_9_rounds(
        daemons, config, db,
        lambda: compute_converged(control, db, IRON, "iron"),
        lambda rng: _compute_chaos(control, rng),
        capacity,
        (4, 3, 15.0),
    )  # fmt: skip
    assert rounds >= 3
    assert _counters(db)["nodes"] > IRON + rounds  # every round replaced at least one VM
