"""One definition of preemption: the loss of a node while it served (the cloud shows it
PREEMPTED or TERMINATED, ...: `budget.node_died`, `add_preemptions = 1`). `slots.preemptions`,
the view `v_preemptions_per_fleet` and `tpucared status` (text and JSON) must agree: the real
daemon against the emulator, one node preempted and one terminated."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from inspect_support import preempted
from runtime_support import (
    REPO,
    SLOW,
    Control,
    Daemon,
    cli_env,
    converged,
    live_nodes,
    query,
    wait_for,
    write_config,
)

from tpucared.core.model.records import NodePhase as P
from tpucared.inspect.status import status_document
from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head

pytestmark = pytest.mark.slow


async def _status(config: Path, *extra: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tpucared", "status", "-c", str(config), *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=cli_env(), cwd=REPO,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_preempted_and_terminated_count_the_same_everywhere(
    tmp_path: Path, control: Control
) -> None:
    db = tmp_path / "state.db"
    config = write_config(tmp_path, control.emulator.url, size=2)
    daemon = Daemon(config=config, log_path=tmp_path / "daemon.log")
    await daemon.start()
    try:
        await wait_for(lambda: converged(control, db, 2), SLOW, "2 READY slices")
        first = {slot: row["id"] for slot, row in live_nodes(db).items()}
        await control.node_action("sweep-0", "preempt")
        await control.node_action("sweep-1", "terminate")

        async def counted() -> bool:
            rows = query(db, "SELECT sum(preemptions) AS n FROM slots")
            return rows[0]["n"] == 2

        await wait_for(counted, SLOW, "both losses counted in slots.preemptions")
        await wait_for(lambda: converged(control, db, 2), SLOW, "the fleet replaced")
    finally:
        await daemon.kill()

    ended = {
        r["id"]: r["end_reason"]
        for r in query(db, "SELECT id, end_reason FROM nodes WHERE id IN (?, ?)", *first.values())
    }
    assert sorted(ended.values()) == ["preempted", "terminated"]

    per_slot = {r["slot"]: r["preemptions"] for r in query(db, "SELECT * FROM slots")}
    assert per_slot == {0: 1, 1: 1}
    (view,) = query(db, "SELECT * FROM v_preemptions_per_fleet")
    assert (view["fleet"], view["preemptions"], view["slots_hit"]) == ("sweep", 2, 2)
    assert view["first_at"] is not None
    assert view["last_at"] is not None

    doc = json.loads(await _status(config, "--json"))
    (fleet,) = doc["fleets"]
    assert {s["slot"]: s["preemptions"] for s in fleet["slots"]} == per_slot
    text = await _status(config)
    assert "sweep: 2/2 ready, 0 running, 2 preemptions, 0 failures" in text, text


async def test_every_kind_of_loss_counts_and_planned_ends_do_not(tmp_path: Path) -> None:
    """Store level, every path that counts: a preempted, a terminated, a vanished node and
    one deleted outside tpucared count; a planned delete and a failed create do not."""
    db = tmp_path / "state.db"
    await upgrade_to_head(db)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    async with Store.open(db) as store:
        async with store.write() as tx:
            await tx.record_fleet("f", "h", json.dumps({"zones": ["z"]}), t0)
            await tx.ensure_slots("f", 3, t0)
            t = t0
            for slot, reason in ((0, "preempted"), (1, "terminated"), (0, "vanished")):
                n = await tx.request_node("f", slot, f"f-{slot}", "z", "v4-8", t)
                await tx.transition(n.id, P.REQUESTED, P.READY, t)
                t += timedelta(minutes=1)
                await tx.transition(
                    n.id, P.READY, P.DEAD, t, end_reason=reason, slot_update=preempted("f", slot)
                )
                await tx.transition(n.id, P.DEAD, P.DELETED, t)
            n = await tx.request_node("f", 2, "f-2", "z", "v4-8", t)
            await tx.transition(n.id, P.REQUESTED, P.READY, t)
            await tx.transition(
                n.id,
                P.READY,
                P.DELETING,
                t,
                end_reason="deleted outside tpucared",
                slot_update=preempted("f", 2),
            )
            await tx.transition(n.id, P.DELETING, P.DELETED, t)
            n = await tx.request_node("f", 2, "f-2", "z", "v4-8", t)
            await tx.transition(n.id, P.REQUESTED, P.READY, t)
            await tx.begin_delete(n.id, P.READY, t, end_reason="done")  # planned: not counted
            await tx.transition(n.id, P.DELETING, P.DELETED, t)
            n = await tx.request_node("f", 2, "f-2", "z", "v4-8", t)
            await tx.transition(n.id, P.REQUESTED, P.FAILED, t, end_reason="create failed")
        fleets = await store.status()
    per_slot = {r["slot"]: r["preemptions"] for r in query(db, "SELECT * FROM slots")}
    assert per_slot == {0: 2, 1: 1, 2: 1}
    (view,) = query(db, "SELECT * FROM v_preemptions_per_fleet")
    assert (view["preemptions"], view["slots_hit"]) == (4, 3)
    doc = status_document(fleets, t0)
    assert {s["slot"]: s["preemptions"] for s in doc["fleets"][0]["slots"]} == per_slot
