"""A TPU API fleet and Compute Engine fleets in one config, kept alive by the real daemon
process (`python -m tpucared run`) against the emulator, every VM a simulated SSH worker host.

One config, three fleets of one slot each: "sweep" (api "tpu", a v4-8 node), "iron" (api
"compute", a spot tpu7x-standard-4t, `on_preemption` "stop", the default) and "ivy" (api
"compute", a spot ct6e-standard-1t, `on_preemption = "delete"`). TPU7x is stocked out in
iron's first zone, so its slot lands in the second. Each workload is launched over SSH on its
VM; each VM is preempted once (iron with a notice: its metadata says so first; ivy and sweep
without); iron's TERMINATED instance is deleted and made again under its name, ivy's vanished
one is made again; each workload is relaunched with TPUCARED_ATTEMPT=2 and each slot counts
one preemption. `status`, `events`, `exec`, `logs`, `plan` and `down` then work on them.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import SLOW, Control, Daemon, hosts_emulator_options, query, tpucared, wait_for

from bench import daemon_config
from bench.daemon_config import PROJECT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

IRON_ZONES = ["us-central1-c", "us-east5-b"]  # TPU7x stocked out in the first
IVY_ZONE = "us-east5-b"
RUN = 'echo "$TPUCARED_ATTEMPT" >> "$RESULTS/$TPUCARED_FLEET"; sleep 600'
FLEETS = ("sweep", "iron", "ivy")


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    # The preempted VM stays STOPPING a moment, as a real one does before TERMINATED.
    return hosts_emulator_options(emulator_options, tmp_path, compute_stopping_seconds=0.5)


def _config(tmp_path: Path, control: Control, results: Path) -> Path:
    workload = {"run": RUN, "env": {"RESULTS": str(results)}, "stop_grace": "1s"}
    fleets = (
        daemon_config.fleet("sweep", capacity="spot", workload=workload),
        daemon_config.fleet(
            "iron",
            api="compute",
            zones=IRON_ZONES,
            machine_type="tpu7x-standard-4t",
            accelerator_type=None,
            runtime_version=None,
            workload=workload,
        ),
        daemon_config.fleet(
            "ivy",
            api="compute",
            zones=[IVY_ZONE],
            machine_type="ct6e-standard-1t",
            on_preemption="delete",
            accelerator_type=None,
            runtime_version=None,
            workload=workload,
        ),
    )
    config = daemon_config.against_emulator(
        control.emulator.url,
        *fleets,
        poll="200ms",
        ssh={"port": control.emulator.options.ssh_port},
        policy={"vanish_grace": "1s", "create_grace": "10s"},
    )
    return daemon_config.write(tmp_path / "fleet.toml", config)


def attempts(results: Path) -> dict[str, list[int]]:
    files = {fleet: results / fleet for fleet in FLEETS}
    return {
        f: [int(x) for x in p.read_text().split()] if p.exists() else [] for f, p in files.items()
    }


async def instances(control: Control) -> dict[str, dict[str, Any]]:
    """Our Compute Engine instances by name (the control API's internal view)."""
    async with control.session.get(control.base + "/instances") as response:
        found = (await response.json())["instances"]
    return {i["name"]: i for i in found}


async def test_a_tpu_fleet_and_compute_fleets_kept_alive_in_one_config(
    control: Control, daemons: Callable[[Path], Daemon], tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    config = _config(tmp_path, control, results)
    db = tmp_path / "state.db"
    body = {"zone": IRON_ZONES[0], "machine_type": "tpu7x-standard-4t", "available": 0}
    await control._call("PUT", "/capacity", body)
    daemon = await daemons(config).start()

    async def launched(expected: int) -> bool:
        return all(a == list(range(1, expected + 1)) for a in attempts(results).values())

    await wait_for(lambda: launched(1), SLOW, "the first launch on all three fleets")
    first = await instances(control)
    # The stockout moved iron's slot to its second zone.
    assert (first["iron-0"]["zone"], first["iron-0"]["status"]) == (IRON_ZONES[1], "RUNNING")
    assert first["iron-0"]["termination_action"] == "STOP"
    assert first["ivy-0"]["termination_action"] == "DELETE"
    stockouts = query(
        db, "SELECT zone, outcome FROM create_attempts WHERE fleet = 'iron' ORDER BY id"
    )
    assert [(r["zone"], r["outcome"]) for r in stockouts][:2] == [
        (IRON_ZONES[0], "capacity"),
        (IRON_ZONES[1], "ok"),
    ]
    apis = query(db, "SELECT fleet, api FROM nodes ORDER BY fleet")
    assert {r["fleet"]: r["api"] for r in apis} == {
        "iron": "compute",
        "ivy": "compute",
        "sweep": "tpu",
    }

    # One preemption each: iron with a notice (STOP: TERMINATED, then deleted and made
    # again), ivy without (DELETE: gone), sweep through the TPU API.
    path = f"/projects/{PROJECT}/zones/{IRON_ZONES[1]}/instances/iron-0:preempt"
    await control._call("POST", path, {"notice_seconds": 1})
    await control._call("POST", f"/projects/{PROJECT}/zones/{IVY_ZONE}/instances/ivy-0:preempt")
    await control.node_action("sweep-0", "preempt")
    await wait_for(lambda: launched(2), SLOW, "the relaunch of all three with attempt 2")

    again = await instances(control)
    for name in ("iron-0", "ivy-0"):
        assert again[name]["status"] == "RUNNING"
        assert again[name]["instance"]["id"] != first[name]["instance"]["id"]
    slots = query(db, "SELECT fleet, preemptions, failures FROM slots ORDER BY fleet")
    assert [(r["fleet"], r["preemptions"], r["failures"]) for r in slots] == [
        ("iron", 1, 0),
        ("ivy", 1, 0),
        ("sweep", 1, 0),
    ]
    # Each preempted VM was deleted (iron's TERMINATED one by tpucared) and is recorded so.
    ended = query(
        db,
        "SELECT fleet, end_reason FROM nodes WHERE phase = 'deleted' AND ready_at IS NOT NULL "
        "ORDER BY fleet",
    )
    assert [r["fleet"] for r in ended] == ["iron", "ivy", "sweep"]

    # The commands a person runs, on all three fleets.
    code, out, err = await tpucared("status", "-c", str(config), "--json")
    assert code == 0, err
    fleets = {f["name"]: f["slots"][0] for f in json.loads(out)["fleets"]}
    assert sorted(fleets) == sorted(FLEETS)
    iron = fleets["iron"]["node"]
    assert (iron["api"], iron["accelerator_type"], iron["zone"]) == (
        "compute",
        "tpu7x-standard-4t",
        IRON_ZONES[1],
    )
    assert (iron["phase"], iron["cloud_state"]) == ("ready", "RUNNING")
    assert fleets["sweep"]["node"]["api"] == "tpu"
    assert all(fleets[f]["attempts"] == 2 for f in FLEETS)
    code, out, err = await tpucared("status", "-c", str(config))
    assert code == 0, err
    for fleet in FLEETS:
        assert f"{fleet}-0" in out
    code, out, err = await tpucared("events", "-c", str(config))
    assert code == 0, err
    for fleet in FLEETS:
        assert f"{fleet}-0" in out
    # `exec` and `logs` reach the workers of both APIs' VMs over SSH.
    for fleet in ("sweep", "iron"):
        code, out, err = await tpucared("exec", "-c", str(config), f"{fleet}/0", "--", "echo hi")
        assert (code, out.splitlines()) == (0, [f"{fleet}/0/0: hi"]), err
        code, out, err = await tpucared("logs", "-c", str(config), f"{fleet}/0")
        assert code == 0, err
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(SLOW) == 0

    # Each VM listed through its own API: nothing is missing, nothing to do.
    code, out, err = await tpucared("plan", "-c", str(config))
    assert (code, out.strip()) == (0, "nothing to do"), err
    code, out, err = await tpucared("down", "-c", str(config), "--yes")
    assert code == 0, err
    deleted = sorted(line.split()[1] for line in out.splitlines() if line.startswith("deleting"))
    assert deleted == ["iron-0", "ivy-0", "sweep-0"]
    assert await instances(control) == {}
    assert [n for n in await control.nodes() if n["node"].get("labels")] == []


async def test_a_compute_fleet_removed_from_the_config_is_still_listed_through_compute(
    control: Control, daemons: Callable[[Path], Daemon], tmp_path: Path
) -> None:
    """Each node records which API made it (nodes.api): once "iron" and "ivy" are gone from
    the config, their VMs are still listed through Compute Engine, so they are left alone
    as live nodes (not taken for vanished by a TPU API list of their zones, which would leak
    them), and `tpucared down iron ivy` deletes them there."""
    results = tmp_path / "results"
    results.mkdir()
    config = _config(tmp_path, control, results)
    db = tmp_path / "state.db"
    daemon = await daemons(config).start()

    async def running() -> dict[str, str]:
        return {n: i["status"] for n, i in (await instances(control)).items()}

    both = {"iron-0": "RUNNING", "ivy-0": "RUNNING"}
    await wait_for(lambda: _equal(running(), both), SLOW, "iron-0 and ivy-0 RUNNING")
    await wait_for(lambda: _ready(db), SLOW, "iron-0 and ivy-0 recorded READY")
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(SLOW) == 0

    kept = daemon_config.against_emulator(
        control.emulator.url,
        daemon_config.fleet("sweep", capacity="spot"),
        poll="200ms",
        ssh={"port": control.emulator.options.ssh_port},
    )
    daemon_config.write(config, kept)
    daemon = await daemons(config).start()
    await wait_for(lambda: _noticed(db), SLOW, "the notice about the unconfigured fleets")
    await asyncio.sleep(1.0)  # a few more ticks
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(SLOW) == 0
    assert await running() == both
    assert await _ready(db)

    code, out, err = await tpucared("down", "-c", str(config), "--yes", "iron", "ivy")
    assert code == 0, err
    deleted = sorted(line.split()[1] for line in out.splitlines() if line.startswith("deleting"))
    assert deleted == ["iron-0", "ivy-0"]
    assert await instances(control) == {}
    rows = query(db, "SELECT api, phase FROM nodes WHERE fleet != 'sweep'")
    assert [(r["api"], r["phase"]) for r in rows] == [("compute", "deleted")] * 2


async def _equal(got: Any, want: Any) -> bool:
    return bool(await got == want)


async def _ready(db: Path) -> bool:
    rows = query(db, "SELECT fleet, phase FROM nodes WHERE fleet != 'sweep'")
    return sorted((r["fleet"], r["phase"]) for r in rows) == [("iron", "ready"), ("ivy", "ready")]


async def _noticed(db: Path) -> bool:
    rows = query(db, "SELECT message FROM events WHERE message LIKE '%is not in the config%'")
    return len(rows) >= 1
