"""The workload end to end with the real daemon process: a v4-32 slot (4 workers, each the
emulator's SSH host) through a preemption, a crash on one worker, and a clean exit.

The workload appends its TPUCARED_ATTEMPT to a file per worker in a directory outside the
workers' homes (a preempted VM loses its disk; this directory plays a bucket), records its
shell's pid, and exits 0 once a `finish` file appears.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import (
    SLOW,
    Control,
    Daemon,
    hosts_emulator_options,
    query,
    wait_for,
    workload_config,
)

from tpucared_emulator import EmulatorServer

pytestmark = pytest.mark.timeout(240)

FLEET = "pod"
WORKERS = 4

RUN = (
    'echo "$TPUCARED_ATTEMPT" >> "$RESULTS/attempts-$TPUCARED_WORKER"; '
    'echo $$ > "$RESULTS/pid-$TPUCARED_WORKER-$TPUCARED_ATTEMPT"; '
    'while [ ! -e "$RESULTS/finish" ]; do sleep 0.1; done; exit 0'
)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(emulator_options, tmp_path)


def _config(tmp_path: Path, emulator: EmulatorServer, results: Path) -> Path:
    return workload_config(
        tmp_path,
        emulator,
        fleet=FLEET,
        accelerator_type="v4-32",
        run=RUN,
        results=results,
        workload='restart = "on-failure"\nmax_failures = 5',
        tables='[policy]\ncreate_grace = "10s"\nvanish_grace = "2s"',
    )


def _attempts(results: Path) -> list[list[int]]:
    files = [results / f"attempts-{w}" for w in range(WORKERS)]
    return [[int(x) for x in f.read_text().split()] if f.exists() else [] for f in files]


def _slot(db: Path) -> dict[str, Any]:
    rows = query(db, "SELECT * FROM slots WHERE fleet = ? AND slot = 0", FLEET)
    return dict(rows[0]) if rows else {}


async def test_a_pod_slot_survives_preemption_and_a_crash_then_finishes(
    emulator: Any,
    control: Control,
    daemons: Callable[[Path], Daemon],
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    config = _config(tmp_path, emulator, results)
    db = tmp_path / "state.db"
    daemon = await daemons(config).start()

    async def all_workers_ran(attempts: list[int]) -> bool:
        return _attempts(results) == [attempts] * WORKERS

    # Attempt 1 runs on all four workers.
    await wait_for(lambda: all_workers_ran([1]), SLOW, "attempt 1 on every worker")

    # A preemption: the replacement node runs attempt 2 on all four workers.
    await control.node_action(f"{FLEET}-0", "preempt")
    await wait_for(lambda: all_workers_ran([1, 2]), SLOW, "attempt 2 after the preemption")
    slot = _slot(db)
    assert (slot["preemptions"], slot["failures"]) == (1, 0)

    # The process on one worker dies: all four are stopped and relaunched as attempt 3.
    pid = int((results / "pid-2-2").read_text())
    os.kill(pid, signal.SIGKILL)
    await wait_for(lambda: all_workers_ran([1, 2, 3]), SLOW, "attempt 3 after the crash")
    slot = _slot(db)
    assert (slot["preemptions"], slot["failures"]) == (1, 1)
    outcomes = query(
        db, "SELECT number, outcome FROM workload_attempts WHERE fleet = ? ORDER BY number", FLEET
    )
    assert [(r["number"], r["outcome"]) for r in outcomes][:2] == [(1, "preempted"), (2, "failed")]

    # Exit 0 on every worker: the slot is done and its node deleted (on_success = delete).
    (results / "finish").touch()

    async def done_and_deleted() -> bool:
        ours = [n for n in await control.nodes() if n["node"]["labels"].get("tpucared-fleet")]
        return bool(_slot(db).get("done")) and not ours

    await wait_for(done_and_deleted, SLOW, "the slot done and its node deleted")
    last = query(db, "SELECT outcome FROM workload_attempts WHERE fleet = ? AND number = 3", FLEET)
    assert last[0]["outcome"] == "succeeded"
    assert _attempts(results) == [[1, 2, 3]] * WORKERS  # nothing relaunched after success

    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(SLOW) == 0
    await asyncio.sleep(0)
