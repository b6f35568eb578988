"""`tpucared goodput` on a database the real daemon wrote (against the emulator): a slot through
a preemption, the daemon killed with -9, and the ledger read after it adds up to the slot's
wall time to the microsecond, its loss in INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION. With a
workload that writes its progress file (TPUCARED_PROGRESS_FILE, on the emulator's SSH hosts),
its startup is PROGRAM_STARTUP and the progress a preemption threw away since its last
checkpoint is WASTED_PROGRESS_FROM_DISRUPTION, in seconds and steps, with cause preempted."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from runtime_support import (
    SLOW,
    Control,
    Daemon,
    Rig,
    converged,
    hosts_emulator_options,
    live_nodes,
    query,
    tpucared,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.slow

# Starts (1 s), then a step every 0.2 s, a checkpoint every 10 steps, told in the progress file.
TRAIN = (
    "sleep 1; i=0; while :; do sleep 0.2; i=$((i + 1)); "
    'echo "step $i $(date +%s.%N)" >> "$TPUCARED_PROGRESS_FILE"; '
    'if [ $((i % 10)) -eq 0 ]; then echo "checkpoint $i $(date +%s.%N)" '
    '>> "$TPUCARED_PROGRESS_FILE"; fi; done'
)


@pytest.fixture
def emulator_options(
    emulator_options: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> dict[str, Any]:
    """SSH hosts for the workload's test only (the other runs no workload)."""
    if "progress" not in request.node.name:
        return emulator_options
    return hosts_emulator_options(emulator_options, tmp_path)


async def test_the_ledger_of_a_preempted_slot_after_a_kill_9(
    tmp_path: Path, control: Control, daemons: Callable[[Path], Daemon]
) -> None:
    config = write_config(tmp_path, control.emulator.url, size=1)
    db = tmp_path / "state.db"
    daemon = await daemons(config).start()
    await wait_for(lambda: converged(control, db, 1), SLOW, "the fleet")
    first = live_nodes(db)[0]["id"]
    await control.node_action("sweep-0", "preempt")

    async def replaced() -> bool:
        live = live_nodes(db).get(0)
        return live is not None and live["id"] != first and await converged(control, db, 1)

    await wait_for(replaced, SLOW, "the replacement READY")
    await daemon.kill()  # kill -9: the ledger is the database's, not the daemon's memory

    code, out, err = await tpucared("goodput", "--db", str(db), "sweep/0", "--json")
    assert code == 0, err
    slot = _goodput_slot(out)  # its intervals tile its wall time
    intervals = slot["intervals"]
    categories = slot["categories"]
    assert "productive" in categories  # no workload: a READY node is productive
    recovery = categories["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"]
    assert recovery["seconds"] > 0
    assert "provisioning" in recovery["phases"]
    lost = [i for i in intervals if i["category"] == "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"]
    # Deleted, then created again (a tick between the two, if any, reads as provisioning
    # with no node yet).
    assert lost[0]["phase"] == "delete"
    assert {i["phase"] for i in lost[1:]} == {"provisioning"}
    assert {i["zone"] for i in lost} == {"us-central2-b"}
    assert {i["node"] for i in lost} - {None} == {"sweep-0"}
    assert {i["cause"] for i in lost} == {"preempted"}  # the daemon's `loss_cause`

    code, out, err = await tpucared("goodput", "--db", str(db))
    assert code == 0, err
    assert "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION" in out
    assert "since" in out.splitlines()[-1]


def _at(text: str) -> datetime:
    """An ISO time from the JSON or from SQLite (stored in UTC, maybe without the offset)."""
    at = datetime.fromisoformat(text)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _goodput_slot(out: str) -> dict[str, Any]:
    """The one slot of `tpucared goodput --json`'s `out`, once its intervals are seen to tile
    its wall time up to the document's `now` (no gap, no overlap)."""
    document = json.loads(out)
    (fleet,) = document["fleets"]
    (slot,) = fleet["slots"]
    intervals = slot["intervals"]
    starts = [datetime.fromisoformat(i["start"]) for i in intervals]
    ends = [datetime.fromisoformat(i["end"]) for i in intervals]
    assert starts[1:] == ends[:-1]  # no gap, no overlap
    assert ends[-1] == datetime.fromisoformat(document["now"])
    assert slot["wall_s"] == pytest.approx((ends[-1] - starts[0]).total_seconds(), abs=1e-6)
    result: dict[str, Any] = slot
    return result


async def test_a_workloads_progress_file_measures_the_progress_a_preemption_wasted(
    rig: Rig,
) -> None:
    control, db = rig.control, rig.db
    daemon = await rig.start(fleet="sweep", accelerator_type="v4-8", run=TRAIN)

    def recorded() -> sqlite3.Row | None:
        rows = query(db, "SELECT * FROM workload_attempts WHERE number = 1")
        return rows[0] if rows else None

    async def past_a_checkpoint() -> bool:
        # Steps told since a checkpoint the daemon recorded: a preemption now wastes them.
        a = recorded()
        return (
            a is not None
            and (a["last_checkpoint"] or 0) >= 10
            and a["last_step"] - a["last_checkpoint"] >= 3
        )

    await wait_for(past_a_checkpoint, SLOW, "attempt 1 told steps past a checkpoint")
    await control.node_action("sweep-0", "preempt")

    async def attempt_2() -> bool:
        return bool(query(db, "SELECT id FROM workload_attempts WHERE number = 2"))

    await wait_for(attempt_2, SLOW, "attempt 2 on the replacement")
    await daemon.kill()
    first = recorded()
    assert first is not None
    assert first["outcome"] == "preempted"
    assert first["first_step_at"] is not None
    lost_steps = first["last_step"] - first["last_checkpoint"]

    code, out, err = await tpucared("goodput", "--db", str(db), "sweep/0", "--json")
    assert code == 0, err
    slot = _goodput_slot(out)
    intervals = slot["intervals"]
    assert intervals[0]["category"] == "startup"  # the node's bring-up comes first
    startup = [i for i in intervals if i["category"] == "PROGRAM_STARTUP"]
    assert startup
    assert startup[0]["seconds"] >= 0.9  # the workload's 1 s before its first step
    (wasted,) = [i for i in intervals if i["category"] == "WASTED_PROGRESS_FROM_DISRUPTION"]
    assert (wasted["cause"], wasted["steps"]) == ("preempted", lost_steps)
    assert wasted["node"] == "sweep-0"
    assert wasted["seconds"] > 0
    assert _at(wasted["start"]) == _at(first["last_checkpoint_at"])  # the workload's own time
    assert slot["steps_lost"] == lost_steps
    # Right after the waste, the recovery from the same loss.
    after = intervals[intervals.index(wasted) + 1]
    assert (after["category"], after["cause"]) == (
        "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
        "preempted",
    )
    causes = {c["cause"]: c["seconds"] for c in slot["top_causes"]}
    assert causes["preempted"] >= wasted["seconds"]

    code, out, err = await tpucared("goodput", "--db", str(db), "sweep/0")
    assert code == 0, err
    assert f"{lost_steps} steps lost" in out
