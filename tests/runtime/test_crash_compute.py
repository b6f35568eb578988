"""kill -9 at random moments, for a Compute Engine fleet (issue 27): the daemon is killed again
and again while its spot VMs are preempted (with STOP: TERMINATED, or DELETE: gone),
terminated, vanished, deleted and inserted; after every restart the fleet converges to exactly
`size` RUNNING instances of ours, each the live incarnation of its slot (no leak, no duplicate
in any zone), counters never go down, and the database's invariants hold after every kill.
Leaner than test_crash.py (fewer rounds): the same machinery under another cloud API.

The same for a fleet of multi-host slices (issue 28: each slot a MIG of 2 VMs with a workload
policy and an instance template): the chaos hits the slices' VMs, and besides converging to
`size` whole slices, the daemon never leaves more than the one template and the policies
(one per region) the fleet uses, and `down` after the last kill leaves no MIG, template or
policy."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from crash_support import CHAOS_POLICY, Chaos, check_invariants, counters, kill_rounds
from runtime_support import (
    OWNER,
    PROJECT,
    SLOW,
    Control,
    Daemon,
    live_nodes,
    tpucared,
    wait_for,
)

from bench import daemon_config

pytestmark = pytest.mark.slow

SEED = 20261126
ROUNDS = 6
MIN_ROUNDS = 4
BUDGET_S = 20.0
FLEET, SIZE = "iron", 2
ZONES = ["us-central1-c", "us-east5-b"]
MACHINE = "tpu7x-standard-4t"
SLICE_TOPOLOGY, SLICE_HOSTS = "2x2x2", 2  # the "slice" variant: a MIG of 2 VMs per slot


def _config(tmp_path: Path, control: Control, topology: str | None) -> Path:
    more = {} if topology is None else {"topology": topology}
    fleet = daemon_config.fleet(
        FLEET, api="compute", zones=ZONES, machine_type=MACHINE, size=SIZE,
        accelerator_type=None, runtime_version=None, capacity="spot", **more,
    )  # fmt: skip
    config = daemon_config.against_emulator(
        control.emulator.url,
        fleet,
        poll="200ms",
        policy=CHAOS_POLICY,
    )
    return daemon_config.write(tmp_path / "fleet.toml", config)


async def _compute(control: Control, path: str) -> list[dict[str, Any]]:
    """The items of a Compute Engine v1 list of the emulator, as the adapter sees them."""
    url = f"{control.emulator.url}/compute/v1/projects/{PROJECT}/{path}"
    async with control.session.get(url) as response:
        items: list[dict[str, Any]] = (await response.json()).get("items", [])
        return items


async def _migs(control: Control) -> dict[str, dict[str, Any]]:
    return {
        m["name"]: m
        for z in ZONES
        for m in await _compute(control, f"zones/{z}/instanceGroupManagers")
    }


async def _shared(control: Control) -> tuple[int, int]:
    """(instance templates, workload policies) in the project, every region of ZONES."""
    regions = sorted({z.rsplit("-", 1)[0] for z in ZONES})
    policies = [
        p for r in regions for p in await _compute(control, f"regions/{r}/resourcePolicies")
    ]
    return len(await _compute(control, "global/instanceTemplates")), len(policies)


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


async def _converged(control: Control, db: Path, topology: str | None) -> bool:
    mine = await _instances(control)
    hosts = 1 if topology is None else SLICE_HOSTS
    if len(mine) != SIZE * hosts or any(i["status"] != "RUNNING" for i in mine):
        return False
    live = live_nodes(db, FLEET)
    if sorted(live) != list(range(SIZE)):
        return False
    if topology is None:
        nodes = {i["name"]: (i["zone"], i["instance"]["id"]) for i in mine}
    else:
        groups = await _migs(control)
        nodes = {n: (m["zone"].rsplit("/", 1)[-1], m["id"]) for n, m in groups.items()}
        # One template (global), one workload policy per region a slice lives in: no more.
        regions = {zone.rsplit("-", 1)[0] for zone, _ in nodes.values()}
        if len(nodes) != SIZE or await _shared(control) != (1, len(regions)):
            return False
    for name, (zone, cloud_id) in nodes.items():
        row = live.get(int(name.rsplit("-", 1)[1]))
        if row is None or (row["phase"], row["node_name"], row["zone"]) != ("ready", name, zone):
            return False
        if row["cloud_id"] != cloud_id or row["api"] != "compute":
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


@pytest.mark.parametrize("topology", [None, SLICE_TOPOLOGY], ids=["vm", "slice"])
async def test_kill_9_at_random_moments_a_compute_fleet_converges(
    tmp_path: Path, control: Control, daemons: Callable[[Path], Daemon], topology: str | None
) -> None:
    rng = random.Random(SEED)
    db = tmp_path / "state.db"
    config = _config(tmp_path, control, topology)

    async def no_shared_resources() -> None:
        # A slice fleet's convergence includes its template and its policies: any other the
        # kills left behind was swept (_converged); a fleet of single VMs makes none.
        if topology is None:
            assert await _shared(control) == (0, 0)

    async def capacity(available: int | None) -> None:
        await _capacity(control, available)

    chaos = Chaos(
        converged=lambda: _converged(control, db, topology),
        break_things=lambda rng: _chaos(control, rng),
        capacity=capacity,
        stockout_p=0.3,
        after_convergence=no_shared_resources,
    )
    rounds = await kill_rounds(
        daemons, config, db, chaos, rng, rounds=ROUNDS, min_rounds=MIN_ROUNDS, budget_s=BUDGET_S
    )

    daemon = await daemons(config).start()
    await wait_for(
        lambda: _converged(control, db, topology), SLOW, "convergence after the last kill"
    )
    await daemon.kill()
    check_invariants(db)
    assert rounds >= MIN_ROUNDS
    assert counters(db)["nodes"] > SIZE + rounds  # every round replaced at least one VM
    # Nothing leaked: `down` removes every instance, MIG, template and policy of ours.
    code, _, err = await tpucared("down", "-c", str(config), "--yes")
    assert code == 0, err
    await wait_for(lambda: _nothing_left(control), SLOW, "no instance, MIG, template or policy")


async def _nothing_left(control: Control) -> bool:
    return (await _instances(control), await _migs(control), await _shared(control)) == (
        [],
        {},
        (0, 0),
    )
