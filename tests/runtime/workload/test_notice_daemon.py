"""The preemption notice end to end, with the real daemon and the emulator's hosts: a v4-16 gets
its notice 20 s before the preemption; every worker's workload gets SIGTERM within seconds while
the node is still READY, checkpoints and exits; the daemon records the notice, ends attempt 1 as
preempted (not failed), deletes the node without waiting for PREEMPTED, and attempt 2 runs on
the replacement with TPUCARED_PREEMPTIONS=1 and TPUCARED_FAILURES=0."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from runtime_support import PROJECT, SLOW, ZONE, Rig, hosts_emulator_options, query, wait_for

pytestmark = pytest.mark.timeout(240)

FLEET = "pod"
WORKERS = 2
NOTICE_S = 20

# Records the attempt's environment, then "trains" until SIGTERM, on which it records the
# time it got it and "checkpoints" (0.5 s) before exiting 0.
RUN = (
    'echo "$TPUCARED_ATTEMPT $TPUCARED_PREEMPTIONS $TPUCARED_FAILURES" '
    '>> "$RESULTS/env-$TPUCARED_WORKER"; '
    'trap \'date +%s.%N > "$RESULTS/term-$TPUCARED_WORKER-$TPUCARED_ATTEMPT"; sleep 0.5; '
    "exit 0' TERM; "
    "while :; do sleep 0.1; done"
)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(emulator_options, tmp_path)


def _envs(results: Path) -> list[list[str]]:
    files = [results / f"env-{w}" for w in range(WORKERS)]
    return [f.read_text().splitlines() if f.exists() else [] for f in files]


async def test_a_notice_stops_the_workload_and_replaces_the_node_before_preempted(rig: Rig) -> None:
    control, results, db = rig.control, rig.results, rig.db
    await rig.start(
        fleet=FLEET, accelerator_type="v4-16", run=RUN, poll="2s", workload='stop_grace = "10s"'
    )

    async def attempt(n: int, preemptions: int) -> bool:
        return all(f"{n} {preemptions} 0" in lines for lines in _envs(results))

    await wait_for(lambda: attempt(1, 0), SLOW, "attempt 1 on every worker")
    old = next(n for n in await control.nodes() if n["node_id"] == f"{FLEET}-0")["node"]["id"]

    noticed = time.time()
    node = await control._call(
        "POST",
        f"/projects/{PROJECT}/locations/{ZONE}/nodes/{FLEET}-0:preempt",
        {"notice_seconds": NOTICE_S},
    )
    assert node["state"] == "READY"

    async def terminated() -> bool:
        return all((results / f"term-{w}-1").exists() for w in range(WORKERS))

    await wait_for(terminated, 5, "SIGTERM on every worker")
    terms = [float((results / f"term-{w}-1").read_text()) - noticed for w in range(WORKERS)]
    assert max(terms) < 3, terms
    # ... while the node still serves: the API says nothing yet.
    now = {n["node_id"]: n for n in await control.nodes()}
    assert now[f"{FLEET}-0"]["state"] == "READY"

    # The node is given up and replaced before the API would have said PREEMPTED.
    async def replaced() -> bool:
        node = next((n for n in await control.nodes() if n["node_id"] == f"{FLEET}-0"), None)
        return node is not None and node["node"]["id"] != old

    await wait_for(replaced, NOTICE_S - 2, "a replacement created within the notice")
    await wait_for(lambda: attempt(2, 1), SLOW, "attempt 2 with TPUCARED_PREEMPTIONS=1")
    assert all(lines == ["1 0 0", "2 1 0"] for lines in _envs(results))

    (first,) = query(
        db,
        "SELECT outcome, detail FROM workload_attempts WHERE fleet = ? AND number = 1",
        FLEET,
    )
    assert first["outcome"] == "preempted"
    assert first["detail"].startswith("preemption notice; every worker stopped")
    (slot,) = query(db, "SELECT preemptions, failures FROM slots WHERE fleet = ?", FLEET)
    assert (slot["preemptions"], slot["failures"]) == (1, 0)
    (event,) = query(db, "SELECT * FROM events WHERE kind = 'preemption.notice'")
    assert json.loads(event["details"])["attempt"] == 1
    ended = query(db, "SELECT end_reason FROM nodes WHERE cloud_id = ?", old)
    assert [r["end_reason"] for r in ended] == ["preempted"]
