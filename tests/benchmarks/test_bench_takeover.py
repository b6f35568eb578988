"""The takeover benchmark (bench/takeover.py) works end to end in quick mode: a real PostgreSQL
(tests/postgres_support.py; the benchmark fails, never skips, when it cannot start), the
emulator and two real daemons with a 3 s lease, the leader lost twice (kill -9, SIGSTOP).

Not a performance test: it checks the result file bench.run writes is well-formed, every
takeover came after the loss and by the standby, the first cloud action is the preempted
node's DELETE, after the take, below a generous bound, and the summaries agree with the
samples, so the benchmark cannot rot (or silently measure nothing) unnoticed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import run as harness
from bench import takeover

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SLACK_S = 4.0  # a loaded 2-core machine: a tick and a delete on top of the bound


def test_the_takeover_benchmark_runs_end_to_end_in_quick_mode(tmp_path: Path) -> None:
    lines: list[str] = []

    def quick(flag: bool) -> dict[str, Any]:
        return takeover.run(flag, progress=lines.append)

    path, envelope = harness.run_one("takeover", quick, quick=True, output_dir=tmp_path)

    assert path == tmp_path / "takeover-quick.json"
    data: dict[str, Any] = json.loads(path.read_text())
    assert data == json.loads(json.dumps(envelope))
    assert (data["benchmark"], data["mode"]) == ("takeover", "quick")
    result = data["result"]
    params = result["parameters"]
    assert params["leases_s"] == [3.0]
    [measured] = result["takeover"]
    lease, poll = measured["lease_s"], measured["poll_interval_s"]
    assert (lease, poll) == (3.0, params["poll_interval_s"])
    assert measured["bound_s"] == pytest.approx(lease + lease / 3 + poll)
    samples = measured["raw"]
    assert len(samples) == measured["rounds"] == 2
    assert [s["signal"] for s in samples] == ["SIGKILL", "SIGSTOP"]
    for s in samples:
        # The standby waits the lost lease out: not before the loss, nor before it expires.
        assert 0 < s["taken"] < s["first_action"] < s["bound"] + SLACK_S, s
        assert s["since_renewal"] >= lease - 0.5, s  # the lease's expiry, on the database clock
        assert s["since_renewal"] <= lease + lease / 3 + SLACK_S, s
        assert s["take_to_action"] > 0, s
        assert s["first_action_call"].startswith("DELETE /v2/"), s
        assert s["first_action_call"].endswith(f"/nodes/{takeover.FLEET}-{s['round']}"), s
        assert 0 <= s["preempt_after_loss"] < 1.0, s
        assert s["epochs"][1] == s["epochs"][0] + 1, s
    for key, field in (
        ("taken_s", "taken"),
        ("first_action_s", "first_action"),
        ("since_renewal_s", "since_renewal"),
        ("take_to_action_s", "take_to_action"),
    ):
        summary = measured[key]
        assert summary["n"] == 2
        assert summary["min"] <= summary["median"] <= summary["p99"] <= summary["max"]
        assert summary["samples"] == [s[field] for s in samples]
    assert len(lines) == 2
    assert "loss -> first action" in takeover.render(result)
