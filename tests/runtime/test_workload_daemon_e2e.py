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
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import OWNER, PROJECT, SLOW, ZONE, Control, Daemon, free_port, query, wait_for

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
    return {
        **emulator_options,
        "create_seconds": 0.2,
        "delete_seconds": 0.1,
        "ssh_hosts": True,
        "ssh_port": free_port(),
        "hosts_dir": str(tmp_path / "hosts"),
    }


def _config(tmp_path: Path, endpoint: str, ssh_port: int, results: Path) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [daemon]
            db = "state.db"
            poll_interval = "300ms"
            owner = "{OWNER}"
            http = "127.0.0.1:{free_port()}"

            [gcp]
            project = "{PROJECT}"
            endpoint = "{endpoint}"
            credentials = "none"

            [ssh]
            key = "id_ed25519"
            port = {ssh_port}

            [policy]
            create_grace = "10s"
            vanish_grace = "2s"

            [[fleet]]
            name = "{FLEET}"
            zones = ["{ZONE}"]
            accelerator_type = "v4-32"
            runtime_version = "tpu-ubuntu2204-base"
            size = 1
            capacity = "spot"

            [fleet.workload]
            run = '''{RUN}'''
            env = {{ RESULTS = "{results}" }}
            restart = "on-failure"
            max_failures = 5
            """
        )
    )
    return path


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
    config = _config(tmp_path, emulator.url, emulator.state.options.ssh_port, results)
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
