"""The ledger benchmark (bench/ledger.py) in a tiny mode: a 30-day slot history copied to 40
slots, `tpucared goodput --json` run as a user runs it in each case, every slot's ledger
checked against its wall time by the benchmark itself, before and after the daemon's pass
keeping closed days (the same figures both ways). Not a performance test: the harness
must not rot unnoticed."""

from __future__ import annotations

import pytest

from bench import ledger

pytestmark = pytest.mark.slow


def test_the_ledger_benchmark_runs_and_checks_its_output() -> None:
    result = ledger.run(True, slots=40, days=30)
    assert result["slots"] == 40
    assert result["cycles_per_slot"] == 20  # 30 days / 36 h
    per_slot = 2 * result["cycles_per_slot"]  # a failed create and a node a cycle
    assert result["rows"] == {
        "slots": 40,
        "nodes": 40 * per_slot,
        "workload_attempts": 40 * per_slot,
        "create_attempts": 40 * per_slot,
    }
    assert [r["case"] for r in result["results"]] == [
        "whole history", "--since 7d", "one fleet", "one slot",
    ]  # fmt: skip
    for row in result["results"]:
        assert row["median_s"] > 0
    assert "| whole history |" in ledger.render(result)
    # The daemon's pass kept every slot's closed days; goodput then gave the same figures.
    assert result["kept_slots"] == 40
    assert result["same_figures"] is True
    assert [r["case"] for r in result["kept"]] == [r["case"] for r in result["results"]]
