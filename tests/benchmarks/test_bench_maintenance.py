"""The maintenance benchmark runs end to end in its smallest form (one sample, the
`checkpoint` policy against doing nothing) and says what it measured: not a performance test
(no timing is asserted beyond what the two paths must show), so `make bench` cannot rot
unnoticed."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from bench import maintenance
from bench import run as harness

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_the_maintenance_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    lines: list[str] = []
    # spread 0: the window meets attempt 1 before its first periodic checkpoint.
    tiny = partial(
        maintenance.run, samples=1, paths=("checkpoint", "nothing"), spread=0.0,
        progress=lines.append,
    )  # fmt: skip
    path, envelope = harness.run_one("maintenance", tiny, quick=True, output_dir=tmp_path)
    assert path == tmp_path / "maintenance-quick.json"
    result = envelope["result"]
    checkpointed, nothing = result["summary_s"]["checkpoint"], result["summary_s"]["nothing"]
    assert checkpointed["lost"]["n"] == nothing["lost"]["n"] == 1
    # The policy checkpointed at its signal: nothing computed was thrown away (up to the
    # step time's noise). Doing nothing, every step since the attempt began was: the workload
    # was killed mid-step, before any checkpoint, and attempt 2 began again from step 0.
    assert abs(checkpointed["recomputed"]["median"]) < 1.0
    assert nothing["recomputed"]["median"] > maintenance.START_IN_S / 2
    # The kill is the maintenance's (the node was under maintenance), never a crash: no crash
    # backoff before attempt 2 (docs/benchmarks.md "Host maintenance", the fix it found).
    assert nothing["after_crash"]["median"] == 0
    for figures in (checkpointed, nothing):
        assert 0 < figures["idle"]["median"] <= figures["lost"]["median"] + 1.0
        assert figures["back"]["median"] > 0
    assert result["lost_ratio_to_nothing"]["nothing"] == 1.0
    assert "lost / nothing" in maintenance.render(result)
    assert len(lines) == 1
