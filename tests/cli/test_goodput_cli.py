"""`tpucared goodput` on a real SQLite store filled through the store's own write API: the
table, the JSON document, prices from the config, `--since`, FLEET/SLOT, and its mistakes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from inspect_support import cli, populate, run_cli

from bench import daemon_config
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, NodePhase
from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head

P = NodePhase
RECOVERY = "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"
TRAIN_SPEC = json.dumps(
    {"name": "train", "accelerator_type": "v6e-8", "capacity": "spot", "workload": {"run": "x"}}
)


async def train_db(path: Path, now: datetime) -> datetime:
    """Fleet `train` (v6e-8 spot, 8 chips a slot), slot 0, from `start` = now - 4h: a create
    that failed for capacity (10m), a node READY 5m later, training from +16m until preempted
    at +2h, deleted by +2h02m, a replacement READY at +2h30m and training again from +2h31m."""
    start = now - timedelta(hours=4)

    def t(minutes: int) -> datetime:
        return start + timedelta(minutes=minutes)

    await upgrade_to_head(path)
    async with Store.open(path) as store, store.write() as tx:
        await tx.record_fleet("train", "hash-train", TRAIN_SPEC, start)
        await tx.ensure_slots("train", 1, start)
        failed = await tx.request_node("train", 0, "train-0", "us-east5-b", "v6e-8", t(0))
        await tx.record_create_attempt(
            CreateAttemptRecord("train", 0, "us-east5-b", "v6e-8", t(0), "capacity", 1.0, None,
                                failed.id)
        )  # fmt: skip
        await tx.transition(failed.id, P.REQUESTED, P.FAILED, t(0))
        a = await tx.request_node("train", 0, "train-0", "us-east5-b", "v6e-8", t(10))
        await tx.record_create_attempt(
            CreateAttemptRecord("train", 0, "us-east5-b", "v6e-8", t(10), "ok", 1.0, None, a.id)
        )
        a = await tx.transition(a.id, P.REQUESTED, P.CREATING, t(10))
        a = await tx.transition(a.id, P.CREATING, P.READY, t(15))
        first = await tx.start_attempt(a.id, t(16))
        await tx.transition(a.id, P.READY, P.DEAD, t(120), cause=LossCause.PREEMPTED)
        await tx.finish_attempt(first.id, AttemptOutcome.PREEMPTED, t(121))
        await tx.begin_delete(a.id, P.DEAD, t(121))
        await tx.transition(a.id, P.DELETING, P.DELETED, t(122))
        b = await tx.request_node("train", 0, "train-0", "us-east5-b", "v6e-8", t(122))
        await tx.record_create_attempt(
            CreateAttemptRecord("train", 0, "us-east5-b", "v6e-8", t(122), "ok", 1.0, None, b.id)
        )
        b = await tx.transition(b.id, P.REQUESTED, P.CREATING, t(122))
        b = await tx.transition(b.id, P.CREATING, P.READY, t(150))
        await tx.start_attempt(b.id, t(151))
    return start


@pytest.fixture
async def train(tmp_path: Path) -> tuple[Path, Path]:
    db = tmp_path / "state.db"
    await train_db(db, datetime.now(UTC).replace(microsecond=0))
    config = daemon_config.render(daemon_config.minimal(daemon={"db": str(db)}))
    path = tmp_path / "fleet.toml"
    path.write_text(config + '\n[prices.v6e]\nspot = 2.0\n"on-demand" = 9.0\n', encoding="utf-8")
    return db, path


def test_the_ledger_in_seconds_shares_and_dollars(train: tuple[Path, Path]) -> None:
    _db, config = train
    document = json.loads(cli("goodput", "-c", str(config), "--json"))
    (fleet,) = document["fleets"]
    assert (fleet["accelerator_type"], fleet["capacity"]) == ("v6e-8", "spot")
    assert (fleet["chips_per_slot"], fleet["price_per_chip_hour"]) == (8, 2.0)
    (slot,) = fleet["slots"]
    categories = slot["categories"]
    assert categories["capacity_wait"]["seconds"] == 600
    assert categories["startup"]["phases"] == {"provisioning": 300, "setup": 60}
    recovery = categories[RECOVERY]
    assert recovery["seconds"] == 31 * 60  # the cloud's loss at +2h to training at +2h31m
    assert recovery["phases"] == {"delete": 120, "provisioning": 28 * 60, "setup": 60}
    assert recovery["chip_hours"] == pytest.approx(31 / 60 * 8)
    assert recovery["dollars"] == pytest.approx(31 / 60 * 8 * 2.0)
    assert slot["top_causes"] == [{"cause": "preempted", "seconds": 31 * 60}]
    assert slot["wall_s"] == pytest.approx(4 * 3600, abs=30)  # the CLI's now, a moment later
    productive = categories["productive"]["seconds"]
    assert productive == pytest.approx(4 * 3600 - 600 - 360 - 31 * 60, abs=30)
    assert document["headline"].startswith("$")
    assert (
        "was lost: $8.27 disruption recovery, $2.67 capacity waits, $1.60 startup"
        in (document["headline"])
    )
    lost = [i for i in slot["intervals"] if i["category"] == RECOVERY]
    assert {(i["cause"], i["zone"], i["node"]) for i in lost} == {
        ("preempted", "us-east5-b", "train-0")
    }


def test_the_table_and_since(train: tuple[Path, Path]) -> None:
    _db, config = train
    lines = cli("goodput", "-c", str(config), "train").splitlines()
    assert lines[0] == "fleet train: v6e-8 spot, 8 chips a slot, $2.00 per chip-hour"
    assert lines[1].split() == [
        "SLOT",
        "CATEGORY",
        "SECONDS",
        "SHARE",
        "DOLLARS",
        "SUB-PHASES",
        "(s)",
    ]
    row = next(line for line in lines if line.split()[:2] == ["0", RECOVERY])
    assert row.split()[2:5] == ["1,860", "12.9%", "$8.27"]
    assert "delete 120, provisioning 1,680, setup 60" in row
    assert "  top causes of loss: preempted 1,860 s" in lines
    assert lines[-1].startswith("$")
    assert "was lost" in lines[-1]
    # The last hour: training all along.
    recent = json.loads(cli("goodput", "-c", str(config), "train/0", "--since", "1h", "--json"))
    (slot,) = recent["fleets"][0]["slots"]
    assert list(slot["categories"]) == ["productive"]
    assert slot["wall_s"] == pytest.approx(3600, abs=1)


async def test_without_prices_it_counts_chip_hours(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    await populate(db)
    document = json.loads(cli("goodput", "--db", str(db), "--json"))
    fleets = {f["fleet"]: f for f in document["fleets"]}
    assert fleets["sweep"]["price_per_chip_hour"] is None
    assert fleets["sweep"]["chips_per_slot"] == 16  # v4-32: 32 TensorCores, 16 chips
    slots = fleets["sweep"]["slots"]
    assert slots[2]["intervals"] == []  # never created
    assert RECOVERY in slots[0]["categories"]
    assert "chip-hours" in document["headline"]


def test_mistakes_are_one_line_and_exit_2(train: tuple[Path, Path], tmp_path: Path) -> None:
    db, _config = train
    for args, message in (
        (("nope",), "no fleet named 'nope'"),
        (("train/7",), "fleet 'train' has no slot 7"),
        (("train/x",), "expected FLEET or FLEET/SLOT"),
        (("--since", "soon"), "--since: not a duration"),
    ):
        proc = run_cli("goodput", "--db", str(db), *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr
        assert "Traceback" not in proc.stderr
    missing = run_cli("goodput", "--db", str(tmp_path / "none.db"))
    assert missing.returncode == 2
    assert "no database at" in missing.stderr
