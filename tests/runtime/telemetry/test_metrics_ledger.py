"""The ledger's series on /metrics (runtime/telemetry/ledger_series.py): the figures of
`tpucared goodput` per slot and category, computed on a real store only for the slots whose
records changed, growing with the clock in between, and never going down."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from inspect_support import T0, populate, spec_json

from tpucared.core.ledger.categories import Category, NodeTimes
from tpucared.core.ledger.cost import Prices
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import (
    AttemptOutcome,
    FleetRecord,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.inspect.ledger import ledgers
from tpucared.runtime.telemetry.ledger_series import LedgerSeries
from tpucared.runtime.telemetry.metrics import DaemonMetrics
from tpucared.store import Store
from tpucared.store.ledger_reads import LedgerRecords


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def value(m: DaemonMetrics, name: str, **labels: str) -> float | None:
    result: float | None = m.registry.get_sample_value(name, labels)
    return result


async def test_the_series_are_the_goodput_ledger_and_only_changed_slots_are_recomputed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state.db"
    s = await populate(db)
    m = DaemonMetrics(prices=Prices({("v4", "spot"): 2.0}))
    async with Store.open(db) as store:
        await m.refresh(store, s.now)
        assert m.ledger.recomputed == 4  # every slot, once
        async with store.read() as r:
            exact = ledgers(await r.ledger(), Prices({("v4", "spot"): 2.0}), s.now, None)
        sweep0 = next(row.summary for f in exact for row in f.slots if f.fleet == "sweep")
        for category, seconds in sweep0.seconds.items():
            labels = {"fleet": "sweep", "slot": "0", "category": category.value}
            assert value(m, "tpucared_slot_seconds_total", **labels) == seconds
            assert value(m, "tpucared_cost_dollars_total", **labels) == sweep0.dollars(seconds)
        productive = {"fleet": "sweep", "slot": "0", "category": "productive"}
        before = value(m, "tpucared_slot_seconds_total", **productive)
        assert before is not None
        # Nothing written: nothing recomputed, the open interval grows with the clock.
        await m.refresh(store, s.now + timedelta(seconds=60))
        assert m.ledger.recomputed == 4
        assert value(m, "tpucared_slot_seconds_total", **productive) == before + 60
        # The running attempt's progress is recorded: only that slot is read again.
        async with store.write() as tx:
            await tx.record_progress("sweep", 0, 2, {"last_step": 5})
        await m.refresh(store, s.now + timedelta(seconds=90))
        assert m.ledger.recomputed == 5
        assert value(m, "tpucared_slot_seconds_total", **productive) == before + 90


def test_a_reclassification_adds_to_the_new_category_and_takes_from_none() -> None:
    series = LedgerSeries()
    key = ("f", 0)
    fleets = {"f": FleetRecord("f", "h1", spec_json("f", True), T0)}
    slots = [SlotRecord("f", 0, "run")]
    node = NodeTimes(1, "f-0", "z", "v6e-8", T0, ready_at=T0)
    running = WorkloadAttemptRecord(1, "f", 0, 1, 1, T0, first_step_at=T0, last_step=9,
                                    last_step_at=at(900), last_checkpoint=4,
                                    last_checkpoint_at=at(400))  # fmt: skip
    series.recompute(key, LedgerRecords(fleets, slots, {key: [node]}, {key: [running]}), at(1000))
    assert series.values()[key] == {Category.PRODUCTIVE: 1000.0}
    # The node was lost at 1000: its last 600 s are wasted progress, known only now.
    lost = replace(node, dead_at=at(1000), loss_cause=LossCause.PREEMPTED)
    ended = replace(running, ended_at=at(1010), outcome=AttemptOutcome.PREEMPTED)
    series.recompute(key, LedgerRecords(fleets, slots, {key: [lost]}, {key: [ended]}), at(1020))
    # The exact split is 400 productive + 600 wasted + 20 recovery; productive keeps 1000.
    assert series.values()[key] == {
        Category.PRODUCTIVE: 1000.0,
        Category.WASTED: 600.0,
        Category.RECOVERY: 20.0,
    }
