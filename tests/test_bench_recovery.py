"""The recovery benchmark (bench/recovery.py) works end to end in quick mode: the real daemon
process, the emulator with SSH worker hosts, a v4-32 slot preempted twice.

Not a performance test: it checks the result file bench.run writes is well-formed, every
component of every sample is positive, the components add up to the total, the cloud's parts
are the emulator's stated timing, and the summaries agree with the samples, so the
benchmark cannot rot (or silently measure nothing) unnoticed.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `bench` is a top-level package of the repository, not installed
    sys.path.insert(0, str(ROOT))

from bench import recovery  # noqa: E402
from bench import run as harness  # noqa: E402

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
            parts = [s[k] for k in recovery.COMPONENTS]
            assert all(p > 0 for p in parts), s
            assert math.isclose(sum(parts), s["total"], abs_tol=1e-6), s
            assert math.isclose(s["overhead"], s["total"] - s["create"], abs_tol=1e-6)
            # The cloud's parts are what the emulator was told (its timers are exact).
            poll = measured["poll_interval_s"]
            assert create <= s["create_stated"] <= create + spread * poll
            assert s["create"] == pytest.approx(s["create_stated"], abs=0.2)
            assert s["delete"] == pytest.approx(delete, abs=0.2)
            # READY -> running, split by the daemon's log, adds up too.
            detail = [s[k] for k in recovery.DETAIL]
            assert all(d >= 0 for d in detail), s
            assert math.isclose(sum(detail), s["ready_to_run"], abs_tol=1e-6), s
        components = measured["components_s"]
        for name in (*recovery.COMPONENTS, "total", "overhead"):
            summary = components[name]
            assert summary["n"] == len(samples)
            assert summary["min"] <= summary["median"] <= summary["max"]
            assert summary["samples"] == [round(s[name], 4) for s in samples]
    assert len(lines) == sum(m["samples"] for m in result["recovery"])
    assert "overhead" in recovery.render(result)
