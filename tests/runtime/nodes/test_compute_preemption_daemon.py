"""A preemption, not a failure (issue 27), end to end: the real daemon (`python -m tpucared
run`) keeps two `api = "compute"` fleets of spot TPU7x VMs against the emulator, one whose
VMs stop when preempted (TERMINATED) and one whose VMs are deleted (they vanish). Each
preempted VM's end is "preempted", and its `node.dead` event names the time of its
`compute.instances.preempted` zone operation; a spot VM that vanishes with no such operation
counts as a preemption too, and its event says no operation named it. The records are read
only in the ticks that lost a VM: one zoneOperations.list per lost VM's zone and tick. The
operation's time is the loss's instant (issue 42): kept as `nodes.cloud_lost_at`, and the
slot's ledger (`tpucared goodput --json`) begins its recovery there, with the detection the
daemon took to notice; the vanished VM, with no record, starts it when the daemon saw it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from runtime_support import SLOW, Control, Daemon, compute_fleet, query, tpucared, wait_for

from bench import daemon_config
from bench.daemon_config import PROJECT, ZONE
from tpucared.gcp.fields import parse_time

pytestmark = pytest.mark.timeout(180)

COMPUTE = f"/_emulator/v1/projects/{PROJECT}/zones/{ZONE}/instances"
OPERATIONS = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/operations"


def config(tmp_path: Path, endpoint: str) -> Path:
    text = daemon_config.against_emulator(
        endpoint,
        compute_fleet("iron", 2, "stop"),
        compute_fleet("gone", 1, "delete"),
        poll="300ms",
        policy={"vanish_grace": "1s"},
    )
    return daemon_config.write(tmp_path / "fleet.toml", text)


def ready(db: Path) -> dict[str, Any]:
    rows = query(db, "SELECT * FROM nodes WHERE phase = 'ready'")
    return {r["node_name"]: r for r in rows}


async def preempted_time(control: Control, name: str) -> datetime:
    """When the emulator preempted VM `name`: its preempted operation's insertTime."""
    url = control.emulator.url + OPERATIONS
    params = {"filter": 'operationType="compute.instances.preempted"'}
    async with control.session.get(url, params=params) as response:
        ops = (await response.json()).get("items") or []
    [op] = [o for o in ops if o["targetLink"].endswith(f"/instances/{name}")]
    at = parse_time(op["insertTime"])
    assert at is not None
    return at


async def preempted_at(control: Control, name: str) -> str:
    """When the emulator preempted VM `name`, as its preempted operation says (seconds, Z)."""
    at = await preempted_time(control, name)
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


def _at(text: str) -> datetime:
    """A time from SQLite (stored in UTC, maybe without the offset) or from the JSON."""
    at = datetime.fromisoformat(text)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


async def recovery_start(db: Path, slot: str) -> dict[str, Any]:
    """The first interval of `slot`'s ledger after its productive time, by `tpucared goodput`."""
    code, out, err = await tpucared("goodput", "--db", str(db), slot, "--json")
    assert code == 0, err
    [fleet] = json.loads(out)["fleets"]
    [found] = fleet["slots"]
    intervals: list[dict[str, Any]] = found["intervals"]
    lost = [i for i in intervals if i["category"] == "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"]
    assert lost, intervals
    assert intervals[intervals.index(lost[0]) - 1]["category"] == "productive"
    return lost[0]


async def test_preempted_vms_say_when_and_a_vanished_spot_vm_counts_too(
    tmp_path: Path, control: Control
) -> None:
    db = tmp_path / "state.db"
    daemon = Daemon(config=config(tmp_path, control.emulator.url), log_path=tmp_path / "d.log")
    await daemon.start()
    try:
        names = {"iron-0", "iron-1", "gone-0"}
        await wait_for(lambda: _all_ready(db, names), SLOW, "three READY VMs")
        first = {name: row["id"] for name, row in ready(db).items()}
        stopped = await control.session.post(control.emulator.url + f"{COMPUTE}/iron-0:preempt")
        deleted = await control.session.post(control.emulator.url + f"{COMPUTE}/gone-0:preempt")
        vanished = await control.session.post(control.emulator.url + f"{COMPUTE}/iron-1:vanish")
        assert (stopped.status, deleted.status, vanished.status) == (200, 200, 200)

        async def replaced() -> bool:
            now = ready(db)
            return all(n in now and now[n]["id"] != first[n] for n in names)

        await wait_for(replaced, SLOW, "each slot READY on a new VM")
    finally:
        await daemon.kill()

    ends = {
        r["node_name"]: r["end_reason"]
        for r in query(
            db, f"SELECT * FROM nodes WHERE id IN ({','.join('?' * 3)})", *first.values()
        )
    }
    assert ends == {
        "iron-0": "preempted",
        "gone-0": "preempted",
        "iron-1": "vanished: counted as preempted",
    }
    # The loss's cause (issue 41 item 4): by the record, never a guess without one.
    causes = {
        r["node_name"]: r["loss_cause"]
        for r in query(db, "SELECT node_name, id, loss_cause FROM nodes")
        if r["id"] in first.values()
    }
    assert causes == {"iron-0": "preempted", "gone-0": "preempted", "iron-1": "unknown"}
    # The loss's instant (issue 42): the operation's own time, not when the daemon noticed.
    rows = {
        r["node_name"]: r for r in query(db, "SELECT * FROM nodes") if r["id"] in first.values()
    }
    for name, slot in (("iron-0", "iron/0"), ("gone-0", "gone/0")):
        at = await preempted_time(control, name)
        assert _at(rows[name]["cloud_lost_at"]) == at
        assert at <= _at(rows[name]["dead_at"])
        recovery = await recovery_start(db, slot)
        assert _at(recovery["start"]) == at  # productive up to the cloud's loss
        assert (recovery["phase"], recovery["cause"], recovery["node"]) == (
            "detection", "preempted", name,
        )  # fmt: skip
        assert _at(recovery["end"]) == _at(rows[name]["dead_at"])  # noticed then
    assert rows["iron-1"]["cloud_lost_at"] is None  # no record: the loss is when it was seen
    vanished = await recovery_start(db, "iron/1")
    assert _at(vanished["start"]) == _at(rows["iron-1"]["dead_at"])
    dead = {
        r["node"]: r["message"]
        for r in query(db, "SELECT node, node_id, message FROM events WHERE kind = 'node.dead'")
        if r["node_id"] in first.values()
    }
    for name in ("iron-0", "gone-0"):
        when = await preempted_at(control, name)
        assert dead[name].startswith(f"preempted at {when} (its compute.instances.preempted "), (
            dead[name]
        )
    assert dead["iron-1"] == (
        "vanished: a spot VM lost, no compute.instances.preempted operation names it: "
        "counted as a preemption"
    )
    slots = {(r["fleet"], r["slot"]): r["preemptions"] for r in query(db, "SELECT * FROM slots")}
    assert slots == {("iron", 0): 1, ("iron", 1): 1, ("gone", 0): 1}

    # The operations were read only for the losses: never while every VM ran.
    lines = [json.loads(x) for x in daemon.log_path.read_text().splitlines() if x.startswith("{")]
    reads = [e for e in lines if e.get("event") == "preemption.records_read"]
    assert reads, "the preempted operations were never read"
    assert sum(len(e["nodes"]) for e in reads) == 3, reads


async def _all_ready(db: Path, names: set[str]) -> bool:
    return names <= set(ready(db))
