"""kill -9 at random moments, for a Compute Engine fleet (issue 27): the daemon is killed again
and again while its spot VMs are preempted (with STOP: TERMINATED, or DELETE: gone),
terminated, vanished, deleted and inserted; after every restart the fleet converges to exactly
`size` RUNNING instances of ours, each the live incarnation of its slot (no leak, no duplicate
in any zone), counters never go down, and the database's invariants hold after every kill.
Leaner than test_crash.py (fewer rounds): the same machinery under another cloud API."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import OWNER, PROJECT, REPO, SLOW, Control, Daemon, live_nodes, query, wait_for

from bench import daemon_config

sys.path.insert(0, str(REPO / "tests" / "store"))
from store_support import check_invariants

pytestmark = pytest.mark.slow

SEED = 20261126
ROUNDS = 6
MIN_ROUNDS = 4
BUDGET_S = 20.0
FLEET, SIZE = "iron", 2
ZONES = ["us-central1-c", "us-east5-b"]
MACHINE = "tpu7x-standard-4t"


def _config(tmp_path: Path, control: Control) -> Path:
    fleet = daemon_config.fleet(
        FLEET, api="compute", zones=ZONES, machine_type=MACHINE, size=SIZE,
        accelerator_type=None, runtime_version=None, capacity="spot",
    )  # fmt: skip
    config = daemon_config.against_emulator(
        control.emulator.url,
        fleet,
        poll="200ms",
        policy={
            "vanish_grace": "500ms",
            "capacity_backoff": "200ms",
            "capacity_backoff_cap": "500ms",
            "transient_backoff": "200ms",
            "transient_backoff_cap": "500ms",
        },
    )
    return daemon_config.write(tmp_path / "fleet.toml", config)


async def _instances(control: Control) -> list[dict[str, Any]]:
    """Our fleet's instances, every zone (the control API's internal view)."""
    async with control.session.get(control.base + "/instances") as response:
        found = (await response.json())["instances"]
    return [
        i
        for i in found
        if (i["instance"].get("labels") or {}).get("tpucared-owner") == OWNER
        and (i["instance"].get("labels") or {}).get("tpucared-fleet") == FLEET
    ]


async def _converged(control: Control, db: Path) -> bool:
    mine = await _instances(control)
    if len(mine) != SIZE or any(i["status"] != "RUNNING" for i in mine):
        return False
    live = live_nodes(db, FLEET)
    if sorted(live) != list(range(SIZE)):
        return False
    for inst in mine:
        row = live.get(int(inst["name"].rsplit("-", 1)[1]))
        if row is None or (row["phase"], row["node_name"], row["zone"]) != (
            "ready",
            inst["name"],
            inst["zone"],
        ):
            return False
        if row["cloud_id"] != inst["instance"]["id"] or row["api"] != "compute":
            return False
    return True


async def _chaos(control: Control, rng: random.Random) -> None:
    """Kill some of our RUNNING VMs, each in its own way, at random moments."""
    running = [i for i in await _instances(control) if i["status"] == "RUNNING"]
    for inst in rng.sample(running, k=rng.randint(1, len(running))):
        action = rng.choice(["preempt", "preempt", "terminate", "vanish"])
        path = f"/projects/{PROJECT}/zones/{inst['zone']}/instances/{inst['name']}:{action}"
        with contextlib.suppress(AssertionError):  # it may have changed state meanwhile
            await control._call("POST", path)
        await asyncio.sleep(rng.uniform(0.0, 0.3))


async def _capacity(control: Control, available: int | None) -> None:
    body = {"zone": ZONES[0], "machine_type": MACHINE, "available": available}
    await control._call("PUT", "/capacity", body)


def _counters(db: Path) -> dict[str, int]:
    slots = query(db, "SELECT slot, preemptions FROM slots ORDER BY slot")
    out = {f"preemptions/{r['slot']}": r["preemptions"] for r in slots}
    for table in ("events", "create_attempts", "nodes"):
        out[table] = query(db, f"SELECT count(*) AS n FROM {table}")[0]["n"]
    return out


async def test_kill_9_at_random_moments_a_compute_fleet_converges(
    tmp_path: Path, control: Control, daemons: Callable[[Path], Daemon]
) -> None:
    rng = random.Random(SEED)
    db = tmp_path / "state.db"
    config = _config(tmp_path, control)
    started = time.monotonic()
    seen: dict[str, int] = {}
    rounds = 0
    while rounds < ROUNDS and (rounds < MIN_ROUNDS or time.monotonic() - started < BUDGET_S):
        rounds += 1
        daemon = await daemons(config).start()
        await wait_for(lambda: _converged(control, db), SLOW, f"convergence after restart {rounds}")
        if rng.random() < 0.3:
            await _capacity(control, rng.choice([0, 1]))  # some recreates hit a stockout
        chaos = asyncio.create_task(_chaos(control, rng))
        await asyncio.sleep(rng.uniform(0.05, 1.2))
        await daemon.kill()
        await chaos
        await _capacity(control, None)

        check_invariants(db)
        now = _counters(db)
        for key, value in seen.items():
            assert now.get(key, 0) >= value, f"round {rounds}: {key} went down"
        seen = now

    daemon = await daemons(config).start()
    await wait_for(lambda: _converged(control, db), SLOW, "convergence after the last kill")
    await daemon.kill()
    check_invariants(db)
    assert rounds >= MIN_ROUNDS
    assert _counters(db)["nodes"] > SIZE + rounds  # every round replaced at least one VM
