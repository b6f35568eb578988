"""The write-rate benchmark (bench/writerate.py) works end to end in quick mode: 200 nodes on a
SQLite file and on a real PostgreSQL (tests/postgres_support.py, restarted durable; the
benchmark fails, never skips, when it cannot start), both leading (the lease fence on).

Not a performance test: it checks the result file bench.run writes is well-formed, every phase
measured positive rates for both engines, the ratios are the figures' quotients, and the
databases hold exactly what the phases wrote (every adoption, transition, delete intent and
outcome, the lease never lost), so the benchmark cannot rot (or silently measure nothing)
unnoticed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench import run as harness
from bench import writerate
from tpucared.runtime.nodes.executor import BATCH_S, RECORD_BATCH

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ENGINES = ("sqlite", "postgresql")


def positive_phase(phase: dict[str, Any]) -> None:
    assert phase["transactions"] > 0, phase
    assert phase["wall_s"] > 0, phase
    assert phase["tx_per_s"] > 0, phase
    latency = phase["latency"]
    assert latency["n"] == phase["transactions"], phase
    assert 0 < latency["median_ms"] <= latency["p99_ms"] <= latency["max_ms"], phase
    assert 0 < phase["block_and_commit"]["median_ms"] <= latency["max_ms"], phase


def test_the_writerate_benchmark_runs_end_to_end_in_quick_mode(tmp_path: Path) -> None:
    lines: list[str] = []

    def quick(flag: bool) -> dict[str, Any]:
        return writerate.run(flag, progress=lines.append)

    path, envelope = harness.run_one("writerate", quick, quick=True, output_dir=tmp_path)

    assert path == tmp_path / "writerate-quick.json"
    data: dict[str, Any] = json.loads(path.read_text())
    assert data == json.loads(json.dumps(envelope))
    assert (data["benchmark"], data["mode"]) == ("writerate", "quick")
    assert data["command"] == "python -m bench.run --quick --only writerate"
    assert harness.BENCHMARKS["writerate"] == "bench.writerate"
    result = data["result"]
    params = result["parameters"]
    size = params["nodes"]
    assert size == writerate.QUICK.size
    assert sum(f[2] for f in params["fleets"]) == size
    pg = result["engines"]["postgresql"]
    assert (pg["fsync"], pg["synchronous_commit"]) == ("on", "on")  # durable, not the tests'

    for engine in ENGINES:
        adoption = result["adoption"][engine]
        assert len(adoption["rounds"]) == params["adoption_rounds"]
        for r in adoption["rounds"]:
            positive_phase(r)
            assert r["done"] == r["actions"], r  # every fleet, slot and adoption carried out
        ticks = result["quiet_tick"][engine]
        positive_phase(ticks["ticks"])
        # A tick: the RecordCloud batch and the zone's row; the batch may commit early once
        # open for BATCH_S (a loaded machine: the fresh-clone CI saw 2.25 a tick), so each
        # extra transaction needs BATCH_S of the batches' wall time.
        batch = ticks["cloud_batch"]
        early = batch["transactions"] - params["quiet_ticks"]
        assert 0 <= early <= batch["wall_s"] / BATCH_S, batch
        assert ticks["transactions_per_tick"] == pytest.approx(2 + early / params["quiet_ticks"])
        assert ticks["zone_health"]["transactions"] == params["quiet_ticks"]
        storm = result["storm"][engine]
        assert storm["preempted"] == size
        assert storm["tick"]["done"] == storm["tick"]["actions"] == 2 * size
        assert storm["all"]["delete_outcomes"] == size
        # The tick's transitions and delete intents share its batches (at most RECORD_BATCH
        # actions each, fewer when a batch commits early at BATCH_S on a loaded machine);
        # every delete's outcome is a transaction of its own.
        batches = storm["all"]["transactions"] - size
        assert math.ceil(2 * size / RECORD_BATCH) <= batches < 2 * size
        positive_phase(storm["all"])
        assert storm["all"]["wall_s"] >= storm["tick"]["wall_s"]
        for name in writerate.PATTERNS:
            p = result["patterns"][name][engine]
            assert len(p["rounds"]) == params["pattern_rounds"]
            assert p["median_round"] in p["rounds"]
            for r in p["rounds"]:
                positive_phase(r)
                assert r["transactions"] == params["pattern_writes"]
        if engine == "postgresql":
            assert storm["all"]["server_cpu_ms_per_tx"] > 0  # the server's own processes

        contents = result["contents"][engine]
        assert contents["ok"], contents
        found = contents["found"]
        assert found == contents["expected"]
        assert found["nodes"] == {"deleting": size}  # every node preempted, its delete asked
        assert found["events"]["node.dead"] == found["events"]["node.deleting"] == size
        assert found["preemptions"] == found["delete_calls"] == size
        ticks = params["quiet_ticks"] + params["first_snapshot_rounds"]  # + the standby's
        changed = ticks * params["quiet_changed_per_tick"]
        assert found["events"]["node.cloud"] == changed
        first = result["first_snapshot"][engine]
        assert first["cold_ms"] > 0
        assert first["warm_ms"] > 0
        assert found["lease_epoch"] == 1  # one leader throughout: no write met a lost lease

    assert result["contents"]["sqlite"]["found"] == result["contents"]["postgresql"]["found"]
    for label, r in result["ratios"].items():
        assert r["sqlite"] is not None, label
        if r["sqlite"]:
            assert r["pg_over_sqlite"] == pytest.approx(r["postgresql"] / r["sqlite"], abs=1e-3)
    assert any(line.startswith("storm postgresql") for line in lines)
    assert "PG / SQLite" in writerate.render(result)
