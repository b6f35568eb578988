"""`tpucared goodput` on a database the real daemon wrote (against the emulator): a slot through
a preemption, the daemon killed with -9, and the ledger read after it adds up to the slot's
wall time to the microsecond, its loss in INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from runtime_support import (
    SLOW,
    Control,
    Daemon,
    converged,
    live_nodes,
    tpucared,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.slow


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
    document = json.loads(out)
    (fleet,) = document["fleets"]
    (slot,) = fleet["slots"]
    intervals = slot["intervals"]
    starts = [datetime.fromisoformat(i["start"]) for i in intervals]
    ends = [datetime.fromisoformat(i["end"]) for i in intervals]
    assert starts[1:] == ends[:-1]  # no gap, no overlap
    assert ends[-1] == datetime.fromisoformat(document["now"])
    wall = (ends[-1] - starts[0]).total_seconds()
    assert slot["wall_s"] == pytest.approx(wall, abs=1e-6)
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
