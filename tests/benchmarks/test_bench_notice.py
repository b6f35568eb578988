"""The notice benchmark runs end to end in its smallest form (one sample per path) and says
what it measured: not a performance test (no timing is asserted beyond being positive and in
the right order), so `make bench` cannot rot unnoticed."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from bench import notice
from bench import run as harness

pytestmark = pytest.mark.slow


def test_the_notice_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    lines: list[str] = []
    tiny = partial(notice.run, samples=1, poll=2.0, progress=lines.append)
    path, envelope = harness.run_one("notice", tiny, quick=True, output_dir=tmp_path)
    assert path == tmp_path / "notice-quick.json"
    result = envelope["result"]
    noticed, today = result["summary_s"]["notice"], result["summary_s"]["today"]
    assert noticed["sigterm_last"]["n"] == 1
    assert 0 < noticed["sigterm_last"]["median"] < noticed["delete"]["median"]
    assert noticed["delete"]["median"] < noticed["create"]["median"] < noticed["running"]["median"]
    assert today["running_from_notice"]["median"] == pytest.approx(
        today["running"]["median"] + notice.NOTICE_S
    )
    assert "today" in notice.render(result)
    assert len(lines) == 2
