"""The demo's parts, each alone and fast: the story's schedule, the example config pointed at
the demo's own places, the toy workload's checkpoints and resume, what the summary says, and
the scenario's calls against a real emulator (tests/demo/test_demo.py runs the whole demo)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tpucared.core.model.specs import CapacityKind, FleetSpec
from tpucared.demo.example import EXAMPLES, DemoPlaces, ExampleMissing, demo_config
from tpucared.demo.presenter import PlainView, Reading, SlotSummary, Summary
from tpucared.demo.progress import Progress, read_progress
from tpucared.demo.scenario import (
    WINDOW_IN_S,
    WINDOW_S,
    Injector,
    Maintenance,
    Preempt,
    Stockout,
    drive,
    schedule,
)
from tpucared.gcp import NoAuth
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.gcp.tpu import TpuClient
from tpucared.gcp.tpu.bodies import NodeShape
from tpucared_emulator import EmulatorServer

TOY = EXAMPLES / "toy_train.py"
PROJECT, ZONE = "tpucared-demo", "us-central2-b"


def _fleets() -> list[FleetSpec]:
    return [
        FleetSpec(
            "demo", ("us-central2-b",), "v4-32", 1, {"runtime_version": "tpu-ubuntu2204-base"}
        ),
        FleetSpec(
            "sweep",
            ("us-central2-b", "us-central1-a"),
            "v4-8",
            3,
            {"runtime_version": "tpu-ubuntu2204-base"},
        ),
    ]


# -- the story -----------------------------------------------------------------------------------


def test_a_cycle_preempts_the_star_then_starves_its_zone_and_moves_another_fleet() -> None:
    steps = list(itertools.islice(schedule(_fleets(), seed=7), 9))
    first, window, stockout, other, again, *randoms = steps
    assert isinstance(first, Preempt)
    assert first.node == "demo-0"
    assert first.gate == ("demo", 0)
    # A maintenance window on another sweep slot than the one preempted below, once it trains.
    assert isinstance(window, Maintenance)
    assert window.fleet == "sweep"
    assert window.gate == ("sweep", window.slot)
    assert (window.start_in, window.seconds) == (WINDOW_IN_S, WINDOW_S)
    assert window.why == "host maintenance in 8 s, for 4 s (no workload to checkpoint)"
    assert window.after + stockout.after == 6  # the stockout as before the window came in
    assert isinstance(stockout, Stockout)
    assert (stockout.zone, stockout.accelerator_types) == ("us-central2-b", ("v4-32", "v4-8"))
    assert stockout.gate == ("demo", 0)  # once the star is back at work
    assert isinstance(other, Preempt)
    assert other.fleet == "sweep"
    assert other.slot != window.slot
    assert other.why == "no room in us-central2-b: its replacement must find room in us-central1-a"
    assert isinstance(again, Preempt)
    assert again.node == "demo-0"
    assert again.why == "no room in us-central2-b: its replacement must wait for capacity"
    # All within the stockout: the star's replacement has to wait for the capacity.
    assert other.after + again.after < stockout.seconds
    assert all(isinstance(s, Preempt) for s in randoms)
    assert all(10 <= s.after <= 20 for s in randoms)


def test_the_story_is_fixed_by_its_seed_and_goes_on_for_ever() -> None:
    a = list(itertools.islice(schedule(_fleets(), seed=1), 50))
    b = list(itertools.islice(schedule(_fleets(), seed=1), 50))
    c = list(itertools.islice(schedule(_fleets(), seed=2), 50))
    assert a == b
    assert a != c
    assert len(a) == 50


def test_a_compute_fleets_slots_are_preempted_as_vms() -> None:
    iron = FleetSpec(
        "iron", ("us-central1-c",), "tpu7x-standard-4t", 1, {"runtime_version": ""}, api="compute"
    )
    steps = list(itertools.islice(schedule([*_fleets(), iron], seed=3), 60))
    vms = [s for s in steps if isinstance(s, Preempt) and s.fleet == "iron"]
    assert vms, "a random preemption picks the compute fleet's slot too"
    assert {(s.node, s.api) for s in vms} == {("iron-0", "compute")}
    assert all(s.api == "tpu" for s in steps if isinstance(s, Preempt) and s.fleet != "iron")


def test_no_fleet_no_story() -> None:
    assert list(schedule([], seed=1)) == []


# -- the config ----------------------------------------------------------------------------------


def test_the_example_is_pointed_at_the_demo_and_keeps_the_rest(tmp_path: Path) -> None:
    places = DemoPlaces(
        endpoint="http://127.0.0.1:4242",
        ssh_port=2345,
        db=tmp_path / "state.db",
        http_port=9876,
        checkpoints=tmp_path / "checkpoints",
    )
    config = demo_config(places)
    assert config.path == EXAMPLES / "emulator.toml"
    assert (config.gcp.endpoint, config.gcp.credentials) == ("http://127.0.0.1:4242", "none")
    assert config.ssh.port == 2345
    assert config.ssh.key == tmp_path / "id_ed25519"  # next to the database, not in /tmp
    assert config.daemon.db == str(tmp_path / "state.db")
    assert (config.daemon.http_host, config.daemon.http_port) == ("127.0.0.1", 9876)
    demo, sweep, iron = config.fleets
    assert (demo.accelerator_type, demo.capacity) == ("v4-32", CapacityKind.SPOT)
    # A Compute Engine fleet beside the TPU API ones.
    assert (iron.api, iron.accelerator_type) == ("compute", "tpu7x-standard-4t")
    for fleet in (demo, sweep, iron):
        assert fleet.workload is not None
        assert fleet.workload.env["CHECKPOINT_DIR"] == str(tmp_path / "checkpoints")
        # Relative to the example file, wherever the demo runs from.
        assert fleet.workload.files == {str(TOY): "toy_train.py"}
        assert fleet.workload.run == "python3 toy_train.py"


def test_without_the_examples_the_demo_says_where_they_should_be(tmp_path: Path) -> None:
    places = DemoPlaces("http://127.0.0.1:1", 22, tmp_path / "db", 1, tmp_path / "c")
    with pytest.raises(ExampleMissing, match=r"emulator\.toml not found: .* source checkout"):
        demo_config(places, tmp_path / "emulator.toml")


# -- the toy workload ----------------------------------------------------------------------------


def _toy(tmp_path: Path, attempt: int, steps: int, worker: int = 0) -> str:
    env = {
        **os.environ,
        "CHECKPOINT_DIR": str(tmp_path / "bucket"),
        "TPUCARED_RUN_ID": "demo-0-abc",
        "TPUCARED_ATTEMPT": str(attempt),
        "TPUCARED_WORKER": str(worker),
        "TPUCARED_NODE": "demo-0",
        "TOY_STEPS": str(steps),
        "TOY_STEP_SECONDS": "0",
    }
    done = subprocess.run(
        [sys.executable, str(TOY)], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_the_toy_resumes_from_its_checkpoint_instead_of_step_0(tmp_path: Path) -> None:
    first = _toy(tmp_path, attempt=1, steps=3)
    assert first.splitlines()[0].startswith("starting from step 0 (attempt 1")
    assert "step 3 (attempt 1)" in first
    assert read_progress(tmp_path / "bucket", "demo-0-abc") == Progress(3, 1, 0, "demo-0")

    second = _toy(tmp_path, attempt=2, steps=5)
    assert second.splitlines()[0].startswith("resumed from step 3 (attempt 2")
    assert "step 4 (attempt 2)" in second
    assert "step 1 (attempt 2)" not in second
    assert read_progress(tmp_path / "bucket", "demo-0-abc") == Progress(5, 2, 3, "demo-0")


def test_only_worker_0_writes_the_checkpoint(tmp_path: Path) -> None:
    _toy(tmp_path, attempt=1, steps=2, worker=1)
    assert read_progress(tmp_path / "bucket", "demo-0-abc") is None


@pytest.mark.parametrize("content", ["", "{", '{"step": "x"}', "[]"])
def test_a_missing_or_torn_checkpoint_is_no_progress(tmp_path: Path, content: str) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "state.json").write_text(content)
    assert read_progress(tmp_path, "run") is None
    assert read_progress(tmp_path, "other") is None


# -- what it prints ------------------------------------------------------------------------------


def test_the_summary_names_steps_attempts_and_the_resume_point() -> None:
    summary = Summary(
        preemptions=3,
        replaced=3,
        slots=(
            SlotSummary("demo", 0, 3, 2, Progress(57, 3, 31, "demo-0")),
            SlotSummary("sweep", 0, 1, 0, Progress(40, 1, 0, "sweep-0")),
            SlotSummary("sweep", 1, 0, 0, None),
        ),
    )
    assert summary.lines() == [
        "preemptions detected: 3",
        "nodes replaced: 3",
        "demo/0: step 57 after 3 attempts (resumed from 31)",
        "sweep/0: step 40 after 1 attempt",
        "sweep/1: no step checkpointed (0 attempts)",
    ]


class _Out:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_the_plain_view_says_when_a_slot_starts_or_resumes_training() -> None:
    out = _Out()
    view = PlainView(out)  # type: ignore[arg-type]
    at = datetime(2025, 6, 1, tzinfo=UTC)
    first = Reading([], [], {("demo", 0): Progress(2, 1, 0, "demo-0")}, at)
    view.show(first, 5.0)
    view.show(Reading([], [], {("demo", 0): Progress(4, 1, 0, "demo-0")}, at), 7.0)
    view.show(Reading([], [], {("demo", 0): Progress(9, 2, 4, "demo-0")}, at), 20.0)
    assert out.text.splitlines() == [
        "[demo +0:05] training demo/0: step 2 (attempt 1, from scratch, on demo-0)",
        "[demo +0:20] training demo/0: step 9 (attempt 2, resumed from step 4, on demo-0)",
    ]


# -- the scenario against the emulator -----------------------------------------------------------


async def _node(client: TpuClient, name: str) -> None:
    await client.create_node(
        PROJECT,
        ZONE,
        name,
        NodeShape(
            accelerator_type="v4-8",
            extra={"runtime_version": "tpu-ubuntu2204-base"},
            capacity=CapacityKind.SPOT,
            labels={},
            metadata={},
        ),
    )


async def test_the_scenario_preempts_starves_and_restores_through_the_control_api(
    emulator: EmulatorServer,
) -> None:
    client = TpuClient(emulator.url, token_source=NoAuth())
    lines: list[str] = []
    ripe_asked: list[tuple[str, int]] = []

    def ripe(key: tuple[str, int]) -> bool:
        ripe_asked.append(key)
        return True

    steps = [
        Maintenance(0, ("sweep", 1), "sweep", 1, "sweep-1", 60, 5, "host maintenance"),
        Preempt(0, ("sweep", 0), "sweep", 0, "sweep-0", "a spot preemption"),
        Stockout(0, None, ZONE, ("v4-8",), 0.3, "no v4-8 left"),
    ]
    try:
        await _node(client, "sweep-0")
        await _node(client, "sweep-1")
        async with aiohttp.ClientSession() as session:
            injector = Injector(session, emulator.url, PROJECT)
            await drive(steps, injector, asyncio.Event(), lambda _, line: lines.append(line),
                        ripe=ripe)  # fmt: skip
            node = await client.get_node(PROJECT, ZONE, "sweep-0")
            assert node["state"] == "PREEMPTED"
            window = (await client.get_node(PROJECT, ZONE, "sweep-1"))["upcomingMaintenance"]
            assert (window["type"], window["maintenanceStatus"]) == ("SCHEDULED", "PENDING")
            # Restored by the time drive returns: a stockout never outlives the scenario.
            assert all(c["available"] is None for c in await _capacity(session, emulator))
    finally:
        await client.aclose()
    assert ripe_asked == [("sweep", 1), ("sweep", 0)]
    assert lines == [
        f"schedule maintenance of sweep-1 (v4-8, {ZONE}): host maintenance",
        f"preempt sweep-0 (v4-8, 1 worker, {ZONE}): a spot preemption",
        "stockout for 0s: no v4-8 left",
        f"capacity back in {ZONE}",
    ]


async def _capacity(session: aiohttp.ClientSession, emulator: EmulatorServer) -> list[Any]:
    async with session.get(emulator.url + "/_emulator/v1/capacity") as response:
        body = json.loads(await response.text())
    return list(body["capacity"])


async def test_a_node_that_never_gets_ready_is_skipped_and_a_stop_ends_the_story(
    emulator: EmulatorServer,
) -> None:
    lines: list[str] = []
    stop = asyncio.Event()
    steps = [Preempt(0, None, "sweep", 1, "sweep-1", "a spot preemption")]
    async with aiohttp.ClientSession() as session:
        injector = Injector(session, emulator.url, PROJECT, ready_patience=0.1)
        await drive(steps, injector, stop, lambda _, line: lines.append(line))
        assert lines == ["skipped preempting sweep-1: not READY within 0.1s"]
        stop.set()
        forever = schedule(_fleets(), seed=1)
        await asyncio.wait_for(
            drive(forever, injector, stop, lambda _, line: lines.append(line)), 5
        )
    assert len(lines) == 1


async def test_the_scenario_preempts_a_compute_engine_vm_and_starves_its_machine_type(
    emulator: EmulatorServer,
) -> None:
    zone = "us-central1-c"
    cloud = ComputeCloud(ComputeClient(emulator.url, token_source=NoAuth()), owner=None)
    shape = NodeShape(
        accelerator_type="tpu7x-standard-4t",
        extra={"runtime_version": ""},
        capacity=CapacityKind.SPOT,
    )
    lines: list[str] = []
    try:
        await cloud.create(PROJECT, zone, "iron-0", shape)
        steps = [
            Preempt(0, None, "iron", 0, "iron-0", "a spot preemption", api="compute"),
            Stockout(0, None, zone, ("tpu7x-standard-4t",), 0.3, "no TPU7x left"),
        ]
        async with aiohttp.ClientSession() as session:
            injector = Injector(session, emulator.url, PROJECT)
            await drive(steps, injector, asyncio.Event(), lambda _, line: lines.append(line))
            async with session.get(emulator.url + "/_emulator/v1/instances") as response:
                [vm] = (await response.json())["instances"]
    finally:
        await cloud.aclose()
    assert vm["status"] in ("STOPPING", "TERMINATED")
    assert lines == [
        f"preempt iron-0 (tpu7x-standard-4t VM, {zone}, on_preemption stop): a spot preemption",
        "stockout for 0s: no TPU7x left",
        f"capacity back in {zone}",
    ]
