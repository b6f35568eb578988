"""The benchmark harness works: the fan-out benchmark in a tiny mode (4 workers, 1 run per
method) against a real sshd and the emulator's hosts, written through bench.run's envelope.

Not a performance test: it asserts the result file is well-formed, every timing is positive
and every worker of every method succeeded, so `make bench` cannot rot unnoticed. Needs
/usr/sbin/sshd (openssh-server) and parallel-ssh (pssh), like the benchmark itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bench import common, fanout
from bench import run as harness

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_fanout_benchmark_runs_end_to_end_in_tiny_mode(tmp_path: Path) -> None:
    lines: list[str] = []
    tiny = partial(fanout.run, workers=[4], reps=1, progress=lines.append)
    path, envelope = harness.run_one(
        "fanout", tiny, quick=True, output_dir=tmp_path, extra_versions=fanout.versions
    )

    assert path == tmp_path / "fanout-quick.json"
    data: dict[str, Any] = json.loads(path.read_text())
    assert data == json.loads(json.dumps(envelope))
    assert data["benchmark"] == "fanout"
    assert data["machine"]["cpu_count"] >= 1
    versions = data["versions"]
    assert versions["python"]
    assert versions["asyncssh"]
    assert versions["openssh"].startswith("OpenSSH_")
    assert versions["parallel-ssh"]

    result = data["result"]
    assert set(result["fleets"]) == {"sshd", "emulator"}
    for fleet in result["fleets"].values():
        assert fleet["negotiated"]["tpucared"]["kex"]
        assert fleet["negotiated"]["tpucared"]["cipher"]
        assert fleet["negotiated"]["openssh"]["kex"]
    rows = result["results"]
    methods = {(r["fleet"], r["command"], r["method"], r["kex"]) for r in rows}
    for fleet in ("sshd", "emulator"):
        for command in ("true", "launch"):
            for method in ("tpucared", "tpucared-warm", "parallel-ssh", "ssh-loop"):
                assert (fleet, command, method, None) in methods
    assert ("sshd", "launch", "parallel-ssh", fanout.CLASSIC_KEX) in methods
    for row in rows:
        assert row["workers"] == 4
        assert row["runs"] == 1, row
        assert row["all_workers_ok"] is True, row
        assert row["errors"] == [], row
        assert row["median_s"] > 0
        seconds = row["seconds"]
        assert 0 < seconds["min"] <= seconds["median"] <= seconds["p99"] <= seconds["max"]
        assert row["client_cpu_s"]["median"] >= 0
        assert row["ratio_vs_parallel_ssh_same_p"] > 0
    assert len(result["verdicts"]) == 4
    assert all(v["faster_than_parallel_ssh"] is not None for v in result["verdicts"])
    assert len(lines) == len(rows)  # one progress line per measurement

    table = fanout.render(result)
    assert "parallel-ssh -p64" in table
    assert "tpucared c=64" in table


def test_the_harness_lists_its_benchmarks_from_the_command_line() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "bench.run", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert listed.stdout.split() == list(harness.BENCHMARKS)
    for name in harness.BENCHMARKS:
        assert callable(harness.load(name).run)


def test_statistics() -> None:
    assert common.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert common.percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    summary = common.summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert (summary["n"], summary["median"], summary["min"], summary["max"]) == (5, 3.0, 1.0, 10.0)
    assert summary["p99"] == pytest.approx(9.76)
    assert common.summarize([]) == {"n": 0}
    assert common.ratio(1.0, 4.0) == 0.25
    assert common.ratio(None, 1.0) is None


def test_a_result_names_the_command_that_made_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark run through its own module records that command line (its options decide
    the result), anything else bench.run's."""
    main = ModuleType("__main__")
    main.__spec__ = ModuleSpec("bench.capacity.__main__", None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["capacity", "--api", "compute", "--suffix=-n30"])
    assert harness.invoked_as("capacity-queued-end-compute-n30", False) == (
        "python -m bench.capacity --api compute --suffix=-n30"
    )
    main.__spec__ = ModuleSpec("bench.run", None)
    assert harness.invoked_as("capacity", True) == "python -m bench.run --quick --only capacity"
