"""The capacity benchmark works: quick mode end to end (the real daemon, the SkyPilot and
tpucare replays, one emulator) written through bench.run's envelope, plus its pure parts:
the replayed schedules and the model of the daemon's hunting cycle.

Not a performance test: the end-to-end run checks the result is well-formed and that each
figure is one the method can produce (every latency inside what the schedule allows, every
hunter's requests made of the calls its tool makes), so `make bench` cannot rot unnoticed.
"""

from __future__ import annotations

import dataclasses
import json
import random
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from bench import capacity, replay
from bench import run as harness
from bench.capacity import model
from bench.capacity.samples import analyse, kind_of


@pytest.mark.slow
def test_the_capacity_benchmark_runs_end_to_end_in_quick_mode(tmp_path: Path) -> None:
    lines: list[str] = []
    quick = partial(capacity.run, progress=lines.append)
    path, envelope = harness.run_one("capacity", quick, quick=True, output_dir=tmp_path)

    assert path == tmp_path / "capacity-quick.json"
    data: dict[str, Any] = json.loads(path.read_text())
    assert data == json.loads(json.dumps(envelope))
    assert data["benchmark"] == "capacity"
    assert data["mode"] == "quick"
    assert data["command"] == "python -m bench.run --quick --only capacity"
    assert len(data["machine"]["load_average_at_end"]) == 3
    result = data["result"]
    assert result["errors"] == {}
    settings = capacity.QUICK
    assert result["parameters"]["stockout_s"] == settings.stockout
    assert result["parameters"]["skypilot"]["scale"] == 0.1
    assert result["budget"]["requests_per_minute_per_hunting_slot"] == capacity.BUDGET_PER_SLOT

    groups = result["groups"]
    assert [(g["tool"], g["slots"]) for g in groups] == [(g.tool, g.slots) for g in settings.groups]
    for g in groups:
        assert g["latency_s"]["n"] == 1, g
        kinds = g["requests_per_minute_per_zone"]
        if g["provisioning"] == "queued":
            # The cloud hunts for a queued fleet: the daemon lists (nodes, queued resources)
            # and, in a short stockout, may still be replacing the suspended queued resource.
            assert kinds["queuedResources.list"] > 0, g
            assert "nodes.create" not in kinds, g
            replacing = {"queuedResources.create", "queuedResources.delete", "operations.get"}
            assert set(kinds) <= {"nodes.list", "queuedResources.list", "total", *replacing}, g
            continue
        # Each tool hunts with creates and operation polls, nothing else is counted twice.
        assert kinds["nodes.create"] > 0, g
        assert kinds["operations.get"] > 0, g
        assert kinds["total"] == pytest.approx(
            sum(v for k, v in kinds.items() if k != "total"), abs=0.2
        )
        assert g["requests_per_minute_per_slot"] == pytest.approx(
            kinds["total"] / g["slots"], abs=0.1
        )
    by_key = {g["key"]: g for g in groups}
    # The daemon lists its zone in every tick; the replays only create and poll in a stockout.
    assert by_key["tpucared-default-1"]["requests_per_minute_per_zone"]["nodes.list"] > 0
    assert "nodes.list" not in by_key["skypilot-replay-x0-1-1"]["requests_per_minute_per_zone"]
    assert by_key["tpucared-default-4"]["every_slot_latency_s"]["n"] == 1

    samples = result["samples"]
    assert len(samples) == sum(g.count * g.samples for g in settings.groups)
    assert len({s["zone"] for s in samples}) == len(samples)  # a zone each
    for s in samples:
        assert s["stockout_s"] == pytest.approx(settings.stockout, abs=1.0)
        # The wait is at most one retry cycle: an operation in flight (2 s, seen at the next
        # poll), the longest wait of the schedule, and slack for a loaded machine.
        bound = {"tpucared": 4.0 + 4.0, "tpucare": 1.0 + 5.0, "skypilot": 0.1 * 420 + 5.0}
        assert 0 <= s["latency_s"] < bound[s["tool"]] + 10.0, s
        creates = s["creates_at_s"]
        assert creates == sorted(creates)
        if s["provisioning"] == "queued":
            # Served the instant capacity came back (queued_serve "at-once"), from the queued
            # resource made after the preemption, in the stockout.
            assert s["latency_s"] < 1.0, s
            assert len(creates) == 1, s
            assert creates[0] < s["stockout_s"], s
            continue
        assert creates[-1] == pytest.approx(s["stockout_s"] + s["latency_s"], abs=0.01)
        assert len(creates) >= 2  # at least one create failed in the stockout
    assert len(lines) == len(samples)  # one progress line per sample

    table = capacity.render(result)
    assert "SkyPilot replay" in table
    assert "tpucare replay" in table


def test_the_benchmark_is_registered() -> None:
    assert harness.BENCHMARKS["capacity"] == "bench.capacity"
    assert harness.load("capacity").run is capacity.run


# ---- the replayed schedules


def test_skypilot_keeps_its_jitter_and_starts_over_after_three_attempts() -> None:
    schedule = replay.SkyPilotSchedule()
    rng = random.Random(7)
    gaps = schedule.gaps(rng)
    first, second, restart = next(gaps), next(gaps), next(gaps)
    assert 36.0 <= first <= 84.0  # 60 s +-40 %
    # The next base is the jittered gap x1.6, not 60 x1.6: the jitter is kept.
    assert first * 1.6 * 0.6 <= second <= first * 1.6 * 1.4
    assert restart == 0.0  # FAILOVER relaunches at once with a fresh backoff
    fresh = [next(gaps) for _ in range(40)]
    assert 36.0 <= fresh[0] <= 84.0
    assert max(fresh) <= 300 * 1.4  # capped before the jitter
    assert sum(g > 300 for g in fresh) > 0  # ... so the cap is exceeded, sometimes
    scaled = replay.SkyPilotSchedule(scale=0.1).gaps(random.Random(7))
    assert next(scaled) == pytest.approx(first * 0.1)


def test_gcloud_waits_a_second_then_two_growing_by_1_4_with_jitter() -> None:
    sleeps = replay.GcloudWaiter().sleeps(random.Random(3))
    first, second, third = next(sleeps), next(sleeps), next(sleeps)
    assert first == 1.0
    assert 2.0 <= second <= 3.0
    assert 2.8 <= third <= 3.8


# ---- the model of the daemon's hunting cycle


def test_the_operation_watcher_sees_a_2s_operation_at_its_third_poll() -> None:
    assert capacity.poll_times(2.0, 10.0) == [0.5, 1.5, 3.5]
    assert capacity.poll_times(10.0, 10.0) == [0.5, 1.5, 3.5, 7.5, 12.5]


def test_the_model_prefers_the_new_default_for_a_lone_slot() -> None:
    """The model is of the cycle before issue 17 (bench/capacity/settings.py
    MODELLED_DEFAULT): the default of then against the one before it."""
    new = capacity.simulate(capacity.MODELLED_DEFAULT, slots=1, runs=200)
    old = capacity.simulate(capacity.PREVIOUS_DEFAULT, slots=1, runs=200)
    tight = capacity.simulate(None, slots=1, runs=200)
    assert new["median"] <= 4.0 < 5.0 < old["median"]
    assert new["p99"] < old["p99"] / 2
    # Waiting is what saves requests: the tight loop costs the most, the old default least.
    assert tight["requests_per_minute"] > new["requests_per_minute"]
    assert new["requests_per_minute"] > old["requests_per_minute"]
    assert new["requests_per_minute"] <= capacity.BUDGET_PER_SLOT


def test_the_model_keeps_a_fleet_within_the_zone_budget() -> None:
    for slots in (4, 16):
        rate = capacity.simulate(capacity.MODELLED_DEFAULT, slots=slots, runs=30)[
            "requests_per_minute"
        ]
        assert rate <= capacity.BUDGET_PER_FLEET_ZONE, (slots, rate)


# ---- the queued fleet (issue 44): its requests, its samples, the presets' cells


def test_queued_resource_requests_have_kinds_of_their_own() -> None:
    qrs = "/v2/projects/p/locations/z/queuedResources"

    def kind(method: str, path: str) -> str:
        return kind_of({"method": method, "path": path})

    assert kind("POST", qrs) == "queuedResources.create"
    assert kind("GET", qrs) == "queuedResources.list"
    assert kind("GET", qrs + "/bench-0") == "queuedResources.get"
    assert kind("DELETE", qrs + "/bench-0") == "queuedResources.delete"
    assert kind("POST", qrs + "/bench-0:reset") == "queuedResources.reset"
    assert kind("GET", "/v2/projects/p/locations/z/operations/op-1") == "operations.get"
    assert kind("GET", "/v2/projects/p/locations/z/nodes") == "nodes.list"


def test_a_queued_sample_runs_from_capacity_back_to_the_instant_the_cloud_served_it() -> None:
    settings = dataclasses.replace(capacity.QUEUED, count_from=15.0)
    zone, t0 = "us-bench1-a", 1000.0
    restored = t0 + 60.0
    qrs = f"/v2/projects/p/locations/{zone}/queuedResources"
    nodes = f"/v2/projects/p/locations/{zone}/nodes"
    log = [{"method": "POST", "path": qrs, "time": t0 + 12.0 + i, "status": 200} for i in range(2)]
    for i in range(5):  # one poll of each list every 10 s from 15 s into the stockout
        log += [
            {"method": "GET", "path": nodes, "time": t0 + 15.0 + 10 * i, "status": 200},
            {"method": "GET", "path": qrs, "time": t0 + 15.5 + 10 * i, "status": 200},
        ]
    sample = {
        "group": "tpucared queued",
        "tool": "tpucared",
        "slots": 2,
        "zone": zone,
        "stocked_out": t0,
        "restored": restored,
        "ready_nodes": ["bench-0", "bench-1"],
        "provisioning": "queued",
        "created_at": {"bench-0": restored + 0.01, "bench-1": restored + 0.02},
    }
    out = analyse(sample, log, settings)
    assert out["latency_s"] == pytest.approx(0.01)
    assert out["ready_s"] == pytest.approx(0.01 + settings.timing.create_seconds)
    assert out["every_slot_latency_s"] == pytest.approx(0.02)
    assert out["creates_at_s"] == [12.0, 13.0]
    per_minute = out["requests_per_minute"]  # 45 s counted: 5 of each list
    assert per_minute["nodes.list"] == pytest.approx(5 / 0.75, abs=0.01)
    assert per_minute["queuedResources.list"] == pytest.approx(5 / 0.75, abs=0.01)
    assert "queuedResources.create" not in per_minute  # sent before the counted window
    assert out["requests_per_minute_per_slot"] == pytest.approx(10 / 0.75 / 2, abs=0.01)
    assert "created_at" not in out
    early = {**sample, "created_at": {"bench-0": restored - 1.0, "bench-1": restored}}
    with pytest.raises(RuntimeError, match="before capacity came back"):
        analyse(early, log, settings)


def test_the_queued_preset_has_each_cell_and_runs_one_alone() -> None:
    cells = [(g.key, g.provisioning, g.slots) for g in capacity.QUEUED.groups]
    assert cells == [
        ("tpucared-default-1", "direct", 1),
        ("tpucare-replay-1", "direct", 1),
        ("tpucared-queued-1", "queued", 1),
        ("tpucared-default-16", "direct", 16),
        ("tpucare-replay-16", "direct", 16),
        ("tpucared-queued-16", "queued", 16),
    ]
    one = capacity.chosen(capacity.QUEUED, ["tpucared-queued-16"], 15)
    assert [(g.key, g.samples) for g in one.groups] == [("tpucared-queued-16", 15)]
    two = capacity.chosen(capacity.QUEUED, ["tpucared-default-16", "tpucare-replay-1"], 15, 2)
    assert [(g.key, g.count, g.samples) for g in two.groups] == [
        ("tpucare-replay-1", 2, 15),
        ("tpucared-default-16", 2, 15),
    ]
    assert capacity.chosen(capacity.QUEUED, [], 0) == capacity.QUEUED
    with pytest.raises(SystemExit, match="unknown group"):
        capacity.chosen(capacity.QUEUED, ["tpucared-queued-4"], 0)


def test_at_half_the_loops_requests_a_lone_slot_cannot_wait_less_than_the_loop() -> None:
    """docs/daemon.md's limit of the lone slot with plain creates: the loop's cycle is a
    create and two polls (40 requests a minute: ~4.5 s); at half that, even with no list at
    all, a create and one read per cycle make a 6 s cycle, so a mean wait of at least 3 s."""
    loop = model.lone_slot_floor(40.0, per_cycle=3, fixed_per_minute=0.0)
    assert loop == {"cycle_s": 4.5, "mean_wait_s": 2.25}
    bare = model.lone_slot_floor(20.0, fixed_per_minute=0.0)
    listed = model.lone_slot_floor(20.0)  # with the poll's list every 10 s
    assert bare["mean_wait_s"] == 3.0  # 1.33x the loop's: the goal's 0.7x is out of reach
    assert bare["mean_wait_s"] > loop["mean_wait_s"] > 0.7 * loop["mean_wait_s"]
    assert listed["cycle_s"] == pytest.approx(8.57)
    assert listed["mean_wait_s"] / loop["mean_wait_s"] > 1.9
