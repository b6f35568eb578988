"""The recovery benchmark (bench/recovery.py) works end to end in quick mode: the real daemon
process, the emulator with SSH worker hosts, a v4-32 slot preempted twice, then a slot of two
v4-32 slices (bench/recovery_multi.py) whose slice 1 is preempted twice, then a Compute
Engine fleet's spot tpu7x-standard-4t VM (bench/recovery_compute.py, issue 27) preempted twice,
then a 4-VM spot TPU7x slice, a managed instance group (issue 28), one of its VMs preempted twice.

Not a performance test: it checks the result file bench.run writes is well-formed, every
component of every sample is positive, the components add up to the total, the cloud's parts
are the emulator's stated timing, and the summaries agree with the samples, so the
benchmark cannot rot (or silently measure nothing) unnoticed. For the 2-slice slot: every
worker of both slices started the next attempt (its own stamp), only slice 1 was deleted and
created again (slice 0 kept), the kept slice's runs were stopped, and the per-slice launch
split agrees with the whole. For the Compute Engine VM: the same checks of its components, its
samples paired with the single slice's, and its compute / TPU ratios of medians and p90s.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench import common, recovery
from bench import recovery_compute as compute
from bench import recovery_multi as multi
from bench import run as harness

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_recovery_benchmark_runs_end_to_end_in_quick_mode(tmp_path: Path) -> None:
    lines: list[str] = []

    def quick(flag: bool) -> dict[str, Any]:
        return recovery.run(flag, progress=lines.append)

    path, envelope = harness.run_one("recovery", quick, quick=True, output_dir=tmp_path)

    assert path == tmp_path / "recovery-quick.json"
    data: dict[str, Any] = json.loads(path.read_text())
    assert data == json.loads(json.dumps(envelope))
    assert data["benchmark"] == "recovery"
    assert data["mode"] == "quick"
    assert len(data["machine"]["load_average_at_end"]) == 3
    result = data["result"]
    params = result["parameters"]
    assert (params["accelerator_type"], params["workers"]) == ("v4-32", 4)
    create, delete = params["emulator_create_seconds"], params["emulator_delete_seconds"]
    spread = params["emulator_create_spread_polls"]
    assert result["recovery"], "no poll interval measured"
    for measured in result["recovery"]:
        samples = measured["raw"]
        assert len(samples) == measured["samples"] >= 1
        for s in samples:
            check_components(
                s, poll=measured["poll_interval_s"], create=create, delete=delete, spread=spread
            )
        components = measured["components_s"]
        for name in (*recovery.COMPONENTS, "total", "overhead"):
            summary = components[name]
            assert summary["n"] == len(samples)
            assert summary["min"] <= summary["median"] <= summary["max"]
            assert summary["samples"] == [round(s[name], 4) for s in samples]
    ms = result["multislice"]
    assert ms["parameters"]["slices"] == 2
    assert ms["parameters"]["workers"] == 8
    assert [m["poll_interval_s"] for m in ms["recovery"]] == [
        m["poll_interval_s"] for m in result["recovery"]
    ]
    for measured in ms["recovery"]:
        check_multislice(measured, create=create, delete=delete, spread=spread)
    for versus, single, two in zip(
        ms["versus_single"], result["recovery"], ms["recovery"], strict=True
    ):
        # Paired: the same stated create times, sample by sample.
        stated = [[r["create_stated"] for r in m["raw"]] for m in (single, two)]
        assert stated[0] == stated[1], stated
        for name in ("total", "overhead"):
            s1, s2 = single["components_s"][name]["median"], two["components_s"][name]["median"]
            assert versus[name]["ratio"] == pytest.approx(s2 / s1, abs=1e-3)
    for variant, shape in compute.SHAPES.items():
        check_compute(result, variant, shape, create=create, delete=delete, spread=spread)
    ce = [m for v in compute.SHAPES for m in result[v]["recovery"]]
    measured_rows = (*result["recovery"], *ms["recovery"], *ce)
    assert len(lines) == sum(m["samples"] for m in measured_rows)
    rendered = recovery.render(result)
    assert "overhead" in rendered
    assert "2 slices / 1 slice" in rendered
    assert "Compute Engine compute / TPU API" in rendered
    assert "Compute Engine compute_slice / TPU API" in rendered
    assert "2x2x4 slice (4 VMs)" in rendered


def check_compute(
    result: dict[str, Any],
    variant: str,
    shape: compute.Shape,
    *,
    create: float,
    delete: float,
    spread: float,
) -> None:
    """A Compute Engine variant: its components as the TPU slice's, its samples paired with
    the single slice's, and its compute / TPU ratios of medians and p90s."""
    ce = result[variant]
    assert ce["parameters"]["machine_type"] == "tpu7x-standard-4t"
    assert (ce["parameters"]["topology"], ce["parameters"]["workers"]) == (
        shape.topology,
        shape.workers,
    )
    assert [m["poll_interval_s"] for m in ce["recovery"]] == [
        m["poll_interval_s"] for m in result["recovery"]
    ]
    for measured in ce["recovery"]:
        samples = measured["raw"]
        assert len(samples) == measured["samples"] >= 1
        for s in samples:
            check_components(
                s, poll=measured["poll_interval_s"], create=create, delete=delete, spread=spread
            )
        for name in (*recovery.COMPONENTS, "total", "overhead"):
            summary = measured["components_s"][name]
            assert summary["n"] == len(samples)
            assert summary["samples"] == [round(s[name], 4) for s in samples]
    for versus, single, vm in zip(
        ce["versus_tpu"], result["recovery"], ce["recovery"], strict=True
    ):
        stated = [[r["create_stated"] for r in m["raw"]] for m in (single, vm)]
        assert stated[0] == stated[1], stated
        for name in compute.RATIOS:
            t, c = single["components_s"][name], vm["components_s"][name]
            assert versus[name]["ratio_median"] == pytest.approx(
                c["median"] / t["median"], abs=1e-3
            )
            # The p90s as reported (4 decimals), and their ratio from those: a p90 of a few
            # milliseconds rounded to 4 decimals moves the ratio by more than 1e-3.
            p90 = [round(common.percentile(x["samples"], 90), 4) for x in (t, c)]
            assert [versus[name]["tpu_p90"], versus[name]["compute_p90"]] == p90
            assert versus[name]["ratio_p90"] == pytest.approx(p90[1] / p90[0], abs=1e-3)


def check_components(
    s: dict[str, Any], *, poll: float, create: float, delete: float, spread: float
) -> None:
    """One sample of either variant: its parts are positive and add up to the total; the
    cloud's parts are what the emulator was told (its timers are exact); READY -> running,
    split by the daemon's log, adds up too."""
    parts = [s[k] for k in recovery.COMPONENTS]
    assert all(p > 0 for p in parts), s
    assert math.isclose(sum(parts), s["total"], abs_tol=1e-6), s
    assert math.isclose(s["overhead"], s["total"] - s["create"], abs_tol=1e-6)
    assert create <= s["create_stated"] <= create + spread * poll
    assert s["create"] == pytest.approx(s["create_stated"], abs=0.2)
    assert s["delete"] == pytest.approx(delete, abs=0.2)
    detail = [s[k] for k in recovery.DETAIL]
    assert all(d >= 0 for d in detail), s
    assert math.isclose(sum(detail), s["ready_to_run"], abs_tol=1e-6), s


def check_multislice(
    measured: dict[str, Any], *, create: float, delete: float, spread: float
) -> None:
    samples = measured["raw"]
    assert len(samples) == measured["samples"] >= 1
    poll = measured["poll_interval_s"]
    attempts = [s["attempt"] for s in samples]
    assert attempts == list(range(attempts[0], attempts[0] + len(samples))), attempts
    for s in samples:
        # Attempt k + 1 started on every worker of both slices, after the preemption, the
        # last of them at the sample's end.
        starts = s["starts_s"]
        assert sorted(starts) == ["0", "1"]
        assert all(len(starts[k]) == multi.WORKERS for k in starts), starts
        every = [t for k in starts for t in starts[k]]
        assert all(t > 0 for t in every), starts
        assert max(every) == pytest.approx(s["total"], abs=1e-3)
        # Only the preempted slice was replaced: the kept one was neither deleted nor created.
        assert sorted(set(s["cloud_calls"])) == [
            f"DELETE {multi.PREEMPTED}",
            f"POST {multi.PREEMPTED}",
        ]
        # The kept slice's runs of attempt k were stopped, all of them, before k + 1 started.
        assert len(s["kept_stops_s"]) == multi.WORKERS
        assert 0 < s["survivors_stop"] == pytest.approx(max(s["kept_stops_s"]), abs=1e-3)
        assert s["survivors_stop"] < min(starts["0"])
        assert s["delete_tick_dropped"] >= 0  # the tick of the delete was found in the log
        check_components(s, poll=poll, create=create, delete=delete, spread=spread)
        # The launch per slice: its last one is the launch; the cleanup came first.
        assert max(s[k] for k in multi.PER_SLICE) == pytest.approx(s["launch"], abs=1e-6)
        assert 0 < s["launch_cleanup"] < min(s[k] for k in multi.PER_SLICE)
    components = measured["components_s"]
    for name in (*recovery.COMPONENTS, "total", "overhead", *recovery.DETAIL, *multi.EXTRA):
        summary = components[name]
        assert summary["n"] == len(samples), name
        assert summary["min"] <= summary["median"] <= summary["max"]
        assert summary["samples"] == [round(s[name], 4) for s in samples]
