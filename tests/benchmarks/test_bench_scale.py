"""The scale benchmark (bench/scale.py) in quick mode: 200 adopted nodes in 4 zones, a few
ticks of the real daemon against the emulator in its own process, written through bench.run's
envelope into a temporary directory.

Not a performance test: it checks that the result is well-formed, that every figure is there
and positive, and the one property that must hold at any size: a steady-state tick costs
exactly one nodes.list page per zone and nothing else (no per-node call). At 200 nodes that is
4 requests per tick only if the daemon asks for pages bigger than the API's default. The same
for Compute Engine fleets (`--api compute`, issue 27): one instances.list page per zone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bench import run as harness
from bench import scale, scale_api, scale_procs, scale_storm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_the_scale_benchmark_runs_in_quick_mode(tmp_path: Path) -> None:
    lines: list[str] = []
    path, envelope = harness.run_one(
        "scale", lambda quick: scale.run(quick, progress=lines.append), quick=True,
        output_dir=tmp_path,
    )  # fmt: skip

    assert path == tmp_path / "scale-quick.json"
    data: dict[str, Any] = json.loads(path.read_text())
    assert data == json.loads(json.dumps(envelope))
    assert data["benchmark"] == "scale"
    assert data["machine"]["load_average_at_start"]
    result = data["result"]
    assert result["method"].startswith("Three processes")
    assert result["parameters"]["emulator"] == "own process"
    assert result["failures"] == [], result["failures"]
    (row,) = result["results"]
    assert (row["nodes"], row["variant"], row["zones"]) == (200, "none", 4)
    assert sum(f["size"] for f in row["fleets"]) == 200

    # Steady state: every tick saw every node and had nothing to do.
    assert row["ticks"] == scale.QUICK.ticks
    assert row["ticks_with_actions"] == 0
    assert row["nodes_listed_per_tick"] == [200]
    tick = row["tick_s"]
    assert tick["n"] == row["ticks"]
    assert 0 < tick["min"] <= tick["median"] <= tick["p99"] <= tick["max"]
    assert row["cpu_ms_per_tick"] > 0
    assert 0.0 <= row["cpu_steal_share"] < 1.0  # the hypervisor's share of the window
    assert 0 < row["memory"]["rss_mb"] <= row["memory"]["peak_rss_mb"]
    assert row["db"]["db_mb"] > 0
    assert row["db"]["events"] > 0
    convergence = row["convergence_s"]
    assert 0 < convergence["all_ready"] <= convergence["steady"]

    # The API cost of a tick: list pages, one per zone at this size, and nothing else.
    api = row["api_requests"]
    assert api["by_call_per_tick"] == {"nodes.list": 4.0}, api
    assert api["list_pages_per_tick"] == 4
    assert api["per_tick"] == api["list_pages_per_tick"]
    assert api["total"] == api["list_pages_per_tick"] * row["ticks"]
    assert api["only_list_pages"] is True

    assert any("measuring" in line for line in lines)
    # Each size is one progress line; the table is printed once, by `render`.
    assert [line for line in lines if "tick p50 ms" in line] == [
        scale.render_row(r) for r in result["results"]
    ]
    assert not any(line.startswith("nodes ") for line in lines)  # no table header
    table = scale.render(result)
    assert "200" in table
    assert "none" in table


def test_expected_list_pages() -> None:
    # 10,000 nodes in 4 zones: 2,500 a zone; 3 pages of 1,000, or 500 of the API default 5.
    assert scale.expected_list_pages(10_000, 1000) == 12
    assert scale.expected_list_pages(10_000, None) == 2000
    assert scale.expected_list_pages(10_000, 5000) == 12  # clamped to the emulator's maximum
    assert scale.expected_list_pages(4, 1000) == 4
    assert [n for _, _, n in scale.fleet_layout(10)] == [3, 3, 2, 2]


def test_the_scale_benchmark_runs_the_daemon_on_postgresql() -> None:
    """`--db postgresql` (issue 31): the daemon on a real PostgreSQL server's database (the
    tests' server, bench/scale_db.py), read for its progress and size as the SQLite file is."""
    settings = dataclasses.replace(scale.QUICK, db="postgresql")
    result = scale.run(True, settings=settings, progress=lambda _: None)

    assert result["failures"] == [], result["failures"]
    assert result["parameters"]["db"] == "postgresql"
    (row,) = result["results"]
    assert (row["nodes"], row["ticks_with_actions"]) == (200, 0)
    assert row["convergence_s"]["all_ready"] is not None  # 200 READY rows read from PostgreSQL
    assert row["db"]["kind"] == "postgresql"
    assert row["db"]["events"] >= 400  # each node's slot opened and its node adopted
    assert row["db"]["total_mb"] > 0


def test_the_scale_benchmark_measures_compute_engine_fleets(tmp_path: Path) -> None:
    """`--api compute` (issue 27): 200 seeded tpu7x-standard-4t instances, adopted; a
    steady-state tick costs exactly one instances.list page per zone (maxResults 500), and
    one instanceGroupManagers.list per zone (issue 28)."""
    settings = dataclasses.replace(scale.QUICK, api="compute")
    result = scale.run(True, settings=settings, progress=lambda _: None)

    assert result["failures"] == [], result["failures"]
    assert result["parameters"]["api"] == "compute"
    assert result["parameters"]["machine_type"] == "tpu7x-standard-4t"
    (row,) = result["results"]
    assert (row["nodes"], row["api"], row["ticks_with_actions"]) == (200, "compute", 0)
    assert row["nodes_listed_per_tick"] == [200]
    assert row["tick_s"]["n"] == scale.QUICK.ticks
    api = row["api_requests"]
    # And one MIG list a zone (issue 28: multi-host slices are MIGs, listed every tick).
    assert api["by_call_per_tick"] == {"instances.list": 4.0, "instanceGroupManagers.list": 4.0}
    assert api["page_size_sent"] == ["500"]
    assert api["list_pages_per_tick"] == 4
    assert api["other_lists_per_tick"] == {"instanceGroupManagers.list": 4}
    assert api["only_list_pages"] is True


def test_expected_list_pages_of_compute_engine() -> None:
    # 2,500 instances a zone: 5 pages of 500 (maxResults' maximum and default).
    assert scale_api.expected_list_pages(10_000, 500, "compute") == 20
    assert scale_api.expected_list_pages(10_000, None, "compute") == 20
    assert scale_api.expected_list_pages(10_000, 1000, "compute") == 20  # clamped to 500
    assert scale_api.expected_list_pages(10_000, 1000, "tpu") == 12
    assert scale_api.request_kind(
        {"method": "GET", "path": "/compute/v1/projects/p/zones/z/instances"}
    ) == "instances.list"  # fmt: skip


def test_the_storm_variant_deletes_every_preemption_and_recovers_within_the_create_quota(
    tmp_path: Path,
) -> None:
    """`--variant storm` (issue 31), small: 200 nodes, 2 preempted every tick (1 %), the
    emulator refusing more than 91 creates a minute and making nodes in 0.5 s. Every
    preemption is deleted, the fleet is whole again, and the daemon's create rate (60 a
    minute by default) never meets the emulator's quota."""
    storm = scale_storm.StormSettings(recovery_limit=60.0, create_seconds=0.5)
    settings = dataclasses.replace(scale.QUICK, variants=("storm",), storm=storm)
    result = scale.run(True, settings=settings, progress=lambda _: None)

    assert result["failures"] == [], result["failures"]
    (row,) = result["results"]
    figures = row["storm"]
    assert figures["per_round"] == 2
    assert figures["preempted"] >= 2, figures  # a round every poll while the window lasts
    assert figures["delete_missing"] == 0, figures
    assert figures["delete_delay_s"]["max"] <= 3 * scale.QUICK.poll_interval + 5, figures
    assert figures["recovery_s"] is not None, figures
    assert figures["missing_at_end"] == 0
    assert figures["creates_refused_for_quota"] == 0, figures


def test_the_storm_settings_take_policy_values_as_toml() -> None:
    parser = scale_storm_parser()
    args = parser.parse_args(["--policy", "creates_per_minute=91", "--policy", "max_creates = 8"])
    settings = scale_storm.storm_settings(args)
    assert settings.policy == {"creates_per_minute": 91, "max_creates": 8}
    assert settings.create_quota == scale_storm.REPORTED_CREATE_QUOTA
    assert (
        scale_storm.storm_settings(parser.parse_args(["--create-quota", "0"])).create_quota is None
    )


def scale_storm_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    scale_storm.add_storm_arguments(parser)
    return parser


def test_the_steal_share_is_the_stolen_part_of_the_cpu_time_between_two_readings() -> None:
    before = scale_procs.machine_cpu_ticks()
    assert 0 <= before[0] <= before[1]
    assert scale_procs.steal_share((100, 1_000), (130, 1_100)) == 0.3
    assert scale_procs.steal_share(before, before) == 0.0
