"""`tpucared demo`, exactly as a person runs it (`python -m tpucared demo --duration 60`, its
output into a pipe): it stops by itself with status 0, and what it printed shows a
preemption detected, the node replaced, a host-maintenance window met by a checkpoint before
it, and the toy training resumed from its checkpoints with a higher step count; afterwards
no process of the demo's workers is left running."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

DEMO_TIMEOUT_S = 170.0  # 60 s of demo, start-up and shutdown, on a busy CI machine


def _processes_with(text: str) -> list[int]:
    """Pids of processes whose environment mentions `text` (the demo's directory)."""
    found = []
    needle = text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _notice_events(db: Path, node: str) -> list[tuple[str, str]]:
    """The `preemption.notice` events of `node` in the demo's database."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT kind, message FROM events WHERE kind = 'preemption.notice' AND node = ?",
            (node,),
        )
        return [(str(k), str(m)) for k, m in rows]


def _maintenance(db: Path, fleet: str, slot: int) -> tuple[list[str], list[str]]:
    """The slot's `maintenance.checkpoint` events and the details of its attempts that ended
    checkpointed for a host maintenance, in the demo's database."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        events = conn.execute(
            "SELECT message FROM events WHERE kind = 'maintenance.checkpoint'"
            " AND fleet = ? AND slot = ?",
            (fleet, slot),
        )
        messages = [str(m) for (m,) in events]
        attempts = conn.execute(
            "SELECT detail FROM workload_attempts WHERE fleet = ? AND slot = ?"
            " AND outcome = 'preempted' AND detail LIKE 'checkpointed before host maintenance%'",
            (fleet, slot),
        )
        return messages, [str(d) for (d,) in attempts]


def test_the_demo_shows_preemptions_replacements_and_training_resumed() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tpucared", "demo", "--duration", "60"],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )
    out = done.stdout
    kept = re.search(r"^kept in (\S+):", out, re.MULTILINE)
    directory = Path(kept[1]) if kept else None
    try:
        assert done.returncode == 0, f"{out}\n{done.stderr}"
        # A preemption injected, detected and counted; the first comes with a notice, on which
        # the workload checkpoints before its VM goes.
        assert re.search(r"inject: preempt demo-0 .*: a spot preemption, 8 s notice", out), out
        # The daemon heard the notice (its event, read from the kept database: the printed
        # event lines once missed it, a skip in the presenter's reading noted for issue 43's
        # page, which must not have it). The event is there whichever path heard it first:
        # the notice watch, or the poll's probe reading the workers already stopped (CI's run
        # of 2026-11-29 had the toy training stop 171 ms after its notice, before the watch).
        assert directory is not None
        assert _notice_events(directory / "state.db", "demo-0"), out
        assert re.search(r"training demo/0: checkpoint saved at step \d+ on notice", out), out
        assert re.search(r"demo/0\s+demo-0\s+node\.dead\s+preempted", out), out
        # A host-maintenance window announced on a sweep slot: the daemon's on_maintenance
        # (checkpoint) had the workload checkpoint before the window (its event and the
        # attempt's end, from the kept database), and the training resumed after it.
        window = re.search(
            r"inject: schedule maintenance of sweep-(\d+) .*: host maintenance in", out
        )
        assert window is not None, out
        slot = int(window[1])
        events, ended = _maintenance(directory / "state.db", "sweep", slot)
        assert events, out
        assert ended, out
        after = out[window.end() :]
        saved = re.search(
            rf"training sweep/{slot}: checkpoint saved at step (\d+) on notice", after
        )
        assert saved is not None, out
        again = re.findall(
            rf"training sweep/{slot}: step \d+ \(attempt (\d+), resumed from step (\d+)", after
        )
        assert any(int(a) >= 2 and int(s) >= int(saved[1]) > 0 for a, s in again), out
        preemptions = re.search(r"^  preemptions detected: (\d+)$", out, re.MULTILINE)
        assert preemptions is not None, out
        assert int(preemptions[1]) >= 1
        # The node replaced: a new incarnation of demo-0 READY after the preemption.
        after = out[out.index("node.dead") :]
        assert re.search(r"demo/0\s+demo-0\s+node\.ready\s+demo-0 is READY", after), out
        replaced = re.search(r"^  nodes replaced: (\d+)$", out, re.MULTILINE)
        assert replaced is not None, out
        assert int(replaced[1]) >= 1
        # The training resumed from its checkpoint, not from step 0, and went on.
        resumed = re.findall(
            r"training demo/0: step (\d+) \(attempt (\d+), resumed from step (\d+)", out
        )
        assert resumed, out
        assert all(int(step) > int(start) > 0 for step, _, start in resumed)
        final = re.search(
            r"^  demo/0: step (\d+) after (\d+) attempts \(resumed from (\d+)\)$", out, re.MULTILINE
        )
        assert final is not None, out
        step, attempts, start = (int(g) for g in final.groups())
        assert attempts >= 2
        assert step > start > 0
        assert step >= max(int(s) for s, _, _ in resumed)
        # The ledger of its slots ends the output (inspect/ledger.py's table, then goodput).
        assert re.search(
            r"^where the time went \(tpucared goodput\)\n  fleet demo: .*"
            r"^    0 +productive +\d+ +\d+\.\d% .*^  goodput demo/0: \d+\.\d%$",
            out,
            re.MULTILINE | re.DOTALL,
        ), out
        # Logs went to the file, not into the output.
        assert directory is not None
        assert (directory / "daemon.log").stat().st_size > 0
        assert '"level"' not in out
        # Nothing of the demo is left running: its workers' processes are gone.
        assert _processes_with(str(directory)) == []
    finally:
        if directory is not None and directory.name.startswith("tpucared-demo-"):
            shutil.rmtree(directory, ignore_errors=True)


def test_ctrl_c_stops_the_demo_cleanly_with_nothing_left_running() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpucared", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    directory = None
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        for line in proc.stdout:  # until the training runs on the slice
            lines.append(line)
            if line.startswith("  database"):
                directory = Path(line.split()[-1]).parent
            if "training demo/0" in line or time.monotonic() > deadline:
                break
        assert any("training demo/0" in line for line in lines), "".join(lines)
        assert directory is not None
        assert _processes_with(str(directory)), "the toy training should be running"
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
        out = "".join(lines) + rest
        assert proc.returncode == 0, f"{out}\n{err}"
        assert "SIGINT: stopping the daemon, then the emulator" in out
        assert "\nsummary\n" in out
        assert _processes_with(str(directory)) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if directory is not None and directory.name.startswith("tpucared-demo-"):
            shutil.rmtree(directory, ignore_errors=True)
