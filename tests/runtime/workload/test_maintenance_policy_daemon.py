"""A fleet's `on_maintenance` end to end (issue 41 item 2): the real daemon, the emulator's SSH
hosts, an on-demand v4-8 whose cloud announces a host-maintenance window 12 s ahead while
attempt 1 trains. With `maintenance_lead = "10s"` the workload gets SIGTERM before the window,
checkpoints and exits; attempt 1 ends preempted (never a failure), and then, per policy:
- checkpoint: no launch into the window; attempt 2 starts on the same node once it has passed;
- now: the daemon starts the maintenance itself (v2alpha1 `nodes:performMaintenance`), so
  attempt 2 runs on the same node before the announced window would even have begun;
- replace: the node is deleted with cause `maintenance` and attempt 2 runs on a new one,
  before the window's start.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import (
    PROJECT,
    SLOW,
    ZONE,
    Control,
    Daemon,
    hosts_emulator_options,
    query,
    wait_for,
    workload_config,
)

from tpucared_emulator import EmulatorServer

pytestmark = pytest.mark.timeout(240)

FLEET = "train"
START_IN = 12.0  # the window's start, seconds after it is announced
LENGTH = 3.0  # and how long it lasts

# Records each attempt's start and the step it resumed from, trains (a step every 0.1 s)
# until SIGTERM, on which it records the time and checkpoints its step (0.3 s) before
# exiting 0.
RUN = (
    'step=$(cat "$RESULTS/checkpoint" 2>/dev/null || echo 0); '
    'echo "$TPUCARED_ATTEMPT $TPUCARED_FAILURES $(date +%s.%N) $step" >> "$RESULTS/starts"; '
    'trap \'date +%s.%N > "$RESULTS/term-$TPUCARED_ATTEMPT"; sleep 0.3; '
    'echo $step > "$RESULTS/checkpoint"; exit 0\' TERM; '
    "while :; do step=$((step + 1)); sleep 0.1; done"
)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    # The in-VM TERMINATE_ON_HOST_MAINTENANCE notice 0.5 s before the window.
    return hosts_emulator_options(emulator_options, tmp_path, maintenance_event_lead_seconds=0.5)


async def _started(results: Path, n: int) -> bool:
    return len(_starts(results)) == n


async def _exists(path: Path) -> bool:
    """The file is there with its text: the trap's redirection makes it before `date` writes."""
    return await asyncio.to_thread(lambda: path.exists() and path.read_text().strip() != "")


def _starts(results: Path) -> list[tuple[int, int, float, int]]:
    """(attempt, TPUCARED_FAILURES, start time, the step it resumed from), one per attempt."""
    path = results / "starts"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(a), int(f), float(t), int(s)) for a, f, t, s in (x.split() for x in lines)]


async def _through_a_window(
    policy: str, emulator: EmulatorServer, control: Control, daemons: Callable[[Path], Daemon],
    tmp_path: Path,
) -> tuple[Path, Path, float, str]:  # fmt: skip
    """Attempt 1 running, a window announced, attempt 2 started: (db, results, the window's
    start as epoch seconds, attempt 1's node's cloud id)."""
    results = tmp_path / "results"
    results.mkdir()
    config = workload_config(
        tmp_path, emulator, fleet=FLEET, accelerator_type="v4-8", run=RUN, results=results,
        fleet_lines='capacity = "on-demand"',
        workload=f'stop_grace = "2s"\nmaintenance_lead = "10s"\non_maintenance = "{policy}"',
    )  # fmt: skip
    db = tmp_path / "state.db"
    await daemons(config).start()
    await wait_for(lambda: _started(results, 1), SLOW, "attempt 1 running")
    old = next(n for n in await control.nodes() if n["node_id"] == f"{FLEET}-0")["node"]["id"]
    announced = time.time()
    await control._call(
        "POST",
        f"/projects/{PROJECT}/locations/{ZONE}/nodes/{FLEET}-0:schedule-maintenance",
        {"start_in_seconds": START_IN, "duration_seconds": LENGTH, "type": "SCHEDULED"},
    )
    start = announced + START_IN
    await wait_for(lambda: _exists(results / "term-1"), SLOW, "SIGTERM before the window")
    signalled = float((results / "term-1").read_text())
    assert start - 10.5 < signalled < start, "the signal came at maintenance_lead, not later"
    await wait_for(lambda: _started(results, 2), 60, "attempt 2 after the window")
    (first,) = query(db, "SELECT outcome, detail FROM workload_attempts WHERE number = 1")
    assert first["outcome"] == "preempted"
    assert first["detail"].startswith("checkpointed before host maintenance"), first["detail"]
    (slot,) = query(db, "SELECT failures, attempts FROM slots WHERE fleet = ?", FLEET)
    assert slot["failures"] == 0
    (checkpoint,) = query(db, "SELECT details FROM events WHERE kind = 'maintenance.checkpoint'")
    assert json.loads(checkpoint["details"])["signalled"] is True
    starts = _starts(results)
    assert [(a, f) for a, f, _, _ in starts] == [(1, 0), (2, 0)]  # TPUCARED_FAILURES stays 0
    # Attempt 2 resumed from the checkpoint attempt 1 took at its signal: no step lost.
    checkpoint = int((results / "checkpoint").read_text())
    assert checkpoint > 0
    assert starts[1][3] == checkpoint
    return db, results, start, old


async def _node_ids(control: Control) -> list[str]:
    return [n["node"]["id"] for n in await control.nodes() if n["node_id"] == f"{FLEET}-0"]


async def test_checkpoint_relaunches_on_the_same_node_after_the_window(
    emulator: EmulatorServer, control: Control, daemons: Callable[[Path], Daemon],
    tmp_path: Path,
) -> None:  # fmt: skip
    db, results, start, old = await _through_a_window(
        "checkpoint", emulator, control, daemons, tmp_path
    )
    (_, _, second, _) = _starts(results)[1]
    assert second > start, "no launch into the window"
    assert await _node_ids(control) == [old]
    assert [r["n"] for r in query(db, "SELECT count(*) AS n FROM nodes")] == [1]
    assert not query(db, "SELECT * FROM events WHERE kind LIKE 'maintenance.start%'")


async def test_now_starts_the_maintenance_at_the_checkpoint_and_resumes_before_the_window(
    emulator: EmulatorServer, control: Control, daemons: Callable[[Path], Daemon],
    tmp_path: Path,
) -> None:  # fmt: skip
    db, results, start, old = await _through_a_window("now", emulator, control, daemons, tmp_path)
    (_, _, second, _) = _starts(results)[1]
    assert second < start, "the maintenance ran at the workload's moment, not the window's"
    assert await _node_ids(control) == [old]
    kinds = [
        r["kind"] for r in query(db, "SELECT kind FROM events WHERE kind LIKE 'maintenance.%'")
    ]
    assert kinds == ["maintenance.checkpoint", "maintenance.start_asked", "maintenance.started"]


async def test_replace_moves_the_workload_to_a_new_node_before_the_window(
    emulator: EmulatorServer, control: Control, daemons: Callable[[Path], Daemon],
    tmp_path: Path,
) -> None:  # fmt: skip
    db, results, start, old = await _through_a_window(
        "replace", emulator, control, daemons, tmp_path
    )
    (_, _, second, _) = _starts(results)[1]
    assert second < start
    assert old not in await _node_ids(control)
    ended = query(db, "SELECT loss_cause, end_reason FROM nodes WHERE cloud_id = ?", old)
    assert [(r["loss_cause"], r["end_reason"]) for r in ended] == [
        ("maintenance", "host maintenance")
    ]
