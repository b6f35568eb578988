"""The progress file (TPUCARED_PROGRESS_FILE) as the probe reads it: sh/probe.sh run for real
on a run directory, its answer parsed by `parse_probe`. Garbage is ignored, never fatal, and
only the file's ends are read."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

from tpucared.core.workload.progress import Progress
from tpucared.launch import parse_probe, probe_script
from tpucared.launch.scripts import parse_progress


def probe(run_dir: Path) -> Progress | None:
    done = subprocess.run(["sh", "-c", probe_script(str(run_dir))], capture_output=True,
                          timeout=20, check=True)  # fmt: skip
    return parse_probe(done.stdout.decode()).progress


def when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def test_no_file_no_progress(tmp_path: Path) -> None:
    assert probe(tmp_path) is None


def test_steps_checkpoints_and_their_times_garbage_ignored(tmp_path: Path) -> None:
    (tmp_path / "progress").write_text(
        "loading data\nstep 1 1795900000.5\nstep x\nstep 2\ncheckpoint 2 1795900003\n"
        + "step 9 "
        + "9" * 90
        + "\nstep 3 abc\nstep -4\n\x00\x01 garbage\nstep 4\n"
    )
    got = probe(tmp_path)
    assert got is not None
    assert got.modified_at is not None
    assert (got.step, got.step_at) == (4, None)
    assert (got.checkpoint, got.checkpoint_at) == (2, when(1795900003))
    assert got.first_step_at == when(1795900000.5)


def test_a_big_file_is_read_at_its_ends_only(tmp_path: Path) -> None:
    lines = [f"step {i} {1795900000 + i}" for i in range(3000)]
    # A last line of a megabyte, then the last step: the probe's answer stays small.
    text = "\n".join(lines) + "\ncheckpoint 2990 1795903500\n" + "x" * 1_000_000 + "\nstep 3001\n"
    (tmp_path / "progress").write_text(text)
    done = subprocess.run(["sh", "-c", probe_script(str(tmp_path))], capture_output=True,
                          timeout=20, check=True)  # fmt: skip
    assert len(done.stdout) < 300
    got = parse_probe(done.stdout.decode()).progress
    assert got is not None
    assert (got.step, got.first_step_at) == (3001, when(1795900000))
    assert got.checkpoint is None  # more than 4 KiB from the end: not read


def test_parse_progress_never_fails_on_what_the_workload_wrote() -> None:
    bad = {"step": "1e9", "step_at": "nan", "checkpoint": "9" * 30, "checkpoint_at": "-5",
           "first_step_at": "inf", "progress_at": "soon"}  # fmt: skip
    assert parse_progress(bad) == Progress()
    assert parse_progress({"state": "running"}) is None
