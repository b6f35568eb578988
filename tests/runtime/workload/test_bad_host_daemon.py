"""Bad hosts end to end (issue 41 item 3), the real daemon against the emulator's SSH hosts: a
v4-16 (2 workers) runs attempts that end when told (restart = always, a health check that
passes). Before attempt 2 a process holds worker 1's accelerator (`:hold-accelerator`): the
pre-launch check kills it and attempt 2 runs on the same node. Before attempt 3 a stubborn
holder (it comes back when killed) holds worker 0's: the node is a bad host, a `node.bad_host`
event names the worker and the holder's pid, the node is deleted with cause bad_host and
attempt 3 runs on a new node; `failures` stays 0 (max_failures untouched)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from runtime_support import PROJECT, SLOW, ZONE, Rig, hosts_emulator_options, query, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FLEET = "pod"
WORKERS = 2
# Records its attempt, then "trains" until the test drops stop-<attempt>, and succeeds.
RUN = (
    'echo "$TPUCARED_ATTEMPT" >> "$RESULTS/attempts-$TPUCARED_WORKER"; '
    'while [ ! -e "$RESULTS/stop-$TPUCARED_ATTEMPT" ]; do sleep 0.1; done'
)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(emulator_options, tmp_path)


async def test_a_held_accelerator_is_freed_and_a_stubborn_one_recycles_the_node(rig: Rig) -> None:
    control, results, db = rig.control, rig.results, rig.db
    await rig.start(
        fleet=FLEET, accelerator_type="v4-16", run=RUN, poll="1s",
        workload='restart = "always"\nhealth_check = "true"\nmax_failures = 0',
    )  # fmt: skip

    async def ran(n: int) -> bool:
        files = [results / f"attempts-{w}" for w in range(WORKERS)]
        return all(f.exists() and str(n) in f.read_text().split() for f in files)

    async def hold(worker: int, *, stubborn: bool) -> int:
        path = f"/projects/{PROJECT}/locations/{ZONE}/nodes/{FLEET}-0/workers/{worker}"
        held = await control._call("POST", f"{path}:hold-accelerator", {"stubborn": stubborn})
        return int(held["pid"])

    await wait_for(lambda: ran(1), SLOW, "attempt 1 on every worker")
    first = next(n for n in await control.nodes() if n["node_id"] == f"{FLEET}-0")["node"]["id"]

    # Held, killable: freed by the check before attempt 2, on the same node.
    pid = await hold(1, stubborn=False)
    (results / "stop-1").touch()
    await wait_for(lambda: ran(2), SLOW, "attempt 2 on every worker")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed by the check (and reaped by the emulator)
    assert query(db, "SELECT * FROM events WHERE kind = 'node.bad_host'") == []

    # Held, stubborn: a bad host, recycled; attempt 3 on a new node.
    pid = await hold(0, stubborn=True)
    (results / "stop-2").touch()
    await wait_for(lambda: ran(3), 2 * SLOW, "attempt 3 on a new node")
    (event,) = query(db, "SELECT * FROM events WHERE kind = 'node.bad_host'")
    worker = json.loads(event["details"])["workers"]["0"]
    assert worker["failed"] == "accelerator held"
    assert worker["pids"]  # the holder as it came back
    (bad,) = query(db, "SELECT * FROM nodes WHERE cloud_id = ?", first)
    assert (bad["end_reason"], bad["loss_cause"]) == ("bad host", "bad_host")
    (slot,) = query(db, "SELECT failures, preemptions FROM slots WHERE fleet = ?", FLEET)
    assert (slot["failures"], slot["preemptions"]) == (0, 0)
    numbers = query(db, "SELECT number FROM workload_attempts WHERE fleet = ? ORDER BY id", FLEET)
    assert [r["number"] for r in numbers] == [1, 2, 3]
