"""DaemonMetrics: its own registry, the runtime's calls, and `refresh` on a real store."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from inspect_support import T0, facts, populate, preempted, snapshot
from prometheus_client import REGISTRY

from tpucared.core.ledger.categories import NodeTimes
from tpucared.core.ledger.cost import Prices
from tpucared.core.model.observed import MaintenanceWindow
from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, EventRecord, NodePhase
from tpucared.runtime.telemetry.metrics import DaemonMetrics
from tpucared.store import Store
from tpucared.store.ledger_reads import LedgerRecords
from tpucared.store.snapshot import Snapshot, frozen_mapping

P = NodePhase


def value(m: DaemonMetrics, name: str, **labels: str) -> float | None:
    result: float | None = m.registry.get_sample_value(name, labels)
    return result


def test_the_runtimes_calls_land_in_its_own_registry() -> None:
    m = DaemonMetrics(clock=lambda: 1234.5)
    m.observe_tick(0.3)
    m.observe_tick(2.0, at=T0)
    m.api_request("nodes.list", "200", 0.2)
    m.api_request("nodes.list", "200", 0.1)
    m.api_request("nodes.create", "error", 30.0)
    m.record_create(CreateAttemptRecord("sweep", 1, "z-a", "v4-32", T0, "capacity", 3.0))
    assert value(m, "tpucared_tick_seconds_count") == 2
    assert value(m, "tpucared_tick_seconds_bucket", le="0.5") == 1
    assert value(m, "tpucared_last_tick_timestamp_seconds") == T0.timestamp()
    assert value(m, "tpucared_api_requests_total", call="nodes.list", status="200") == 2
    assert value(m, "tpucared_api_requests_total", call="nodes.create", status="error") == 1
    assert value(m, "tpucared_api_request_seconds_sum", call="nodes.list") is not None
    labels = {"fleet": "sweep", "zone": "z-a", "outcome": "capacity"}
    assert value(m, "tpucared_create_attempts_total", **labels) == 1
    assert REGISTRY.get_sample_value("tpucared_tick_seconds_count") is None  # not global
    assert DaemonMetrics().registry.get_sample_value("tpucared_tick_seconds_count") == 0


async def test_refresh_sets_gauges_and_counts_only_new_events(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    s = await populate(db, now=T0)
    m = DaemonMetrics()
    async with Store.open(db) as store:
        await m.refresh(store, T0)
        # The history before the daemon started is not replayed into counters.
        assert value(m, "tpucared_preemptions_total", fleet="sweep") is None
        assert value(m, "tpucared_nodes", fleet="sweep", phase="ready") == 1
        assert value(m, "tpucared_nodes", fleet="sweep", phase="requested") == 1
        assert value(m, "tpucared_nodes", fleet="sweep", phase="dead") == 0
        assert value(m, "tpucared_nodes", fleet="eval", phase="ready") == 0
        assert value(m, "tpucared_slots", fleet="sweep") == 3
        assert value(m, "tpucared_slots", fleet="eval") == 0  # down
        assert value(m, "tpucared_workloads_running", fleet="sweep") == 1

        # sweep-0 is preempted under its running attempt, then deleted.
        t = T0 + timedelta(minutes=10)
        snap = await store.load_snapshot()
        node, attempt = snap.nodes[("sweep", 0, 0)], snap.running[("sweep", 0)]
        async with store.write() as tx:
            await tx.transition(
                node.id,
                P.READY,
                P.DEAD,
                t,
                cloud=facts("PREEMPTED", t),
                slot_update=preempted("sweep", 0),
            )
            await tx.finish_attempt(attempt.id, AttemptOutcome.PREEMPTED, t)
            await tx.begin_delete(node.id, P.DEAD, t + timedelta(seconds=5))
        await m.refresh(store, t)

    assert value(m, "tpucared_preemptions_total", fleet="sweep") == 1
    labels = {"fleet": "sweep", "outcome": "preempted"}
    assert value(m, "tpucared_workload_attempts_total", **labels) == 1
    assert value(m, "tpucared_dead_to_delete_seconds_sum", fleet="sweep") == 5.0
    assert value(m, "tpucared_recovery_seconds_count", fleet="sweep") is None  # not yet
    assert value(m, "tpucared_nodes", fleet="sweep", phase="ready") == 0
    assert value(m, "tpucared_nodes", fleet="sweep", phase="deleting") == 1
    assert value(m, "tpucared_workloads_running", fleet="sweep") == 0
    # sweep/0 ran for the whole 10 minutes between the two refreshes; sweep/1 never did.
    assert value(m, "tpucared_slot_goodput_ratio", fleet="sweep", slot="0") == 1.0
    assert value(m, "tpucared_slot_productive_seconds_total", fleet="sweep", slot="0") == 600
    assert value(m, "tpucared_slot_wall_seconds_total", fleet="sweep", slot="1") == 600
    assert value(m, "tpucared_slot_goodput_ratio", fleet="sweep", slot="1") == 0.0
    assert s.now == T0


async def test_refresh_reads_long_backlogs_in_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tpucared.runtime.telemetry.metrics.EVENT_PAGE", 7)  # 23 events: 4 pages
    db = tmp_path / "state.db"
    await populate(db, now=T0)
    m = DaemonMetrics()
    async with Store.open(db) as store:
        await m.refresh(store, T0)
        start = m.last_event_id
        assert start is not None
        async with store.write() as tx:
            for i in range(23):
                await tx.append_event("attempt.failed", f"{i}", T0, fleet="sweep", slot=2)
        await m.refresh(store, T0)
    assert m.last_event_id == start + 23
    labels = {"fleet": "sweep", "outcome": "failed"}
    assert value(m, "tpucared_workload_attempts_total", **labels) == 23


def test_series_of_a_slot_that_left_are_removed() -> None:
    m = DaemonMetrics()
    m.set_nodes(snapshot(running=True), T0)
    m.set_nodes(snapshot(running=True), T0 + timedelta(seconds=10))
    assert value(m, "tpucared_slot_goodput_ratio", fleet="f", slot="0") == 1.0
    m.set_nodes(replace(snapshot(), slots=frozen_mapping(), nodes=frozen_mapping()), T0)
    assert value(m, "tpucared_slot_goodput_ratio", fleet="f", slot="0") is None
    assert value(m, "tpucared_slot_wall_seconds_total", fleet="f", slot="0") is None
    assert value(m, "tpucared_nodes", fleet="f", phase="ready") == 0


WINDOW = MaintenanceWindow(T0 + timedelta(days=2), T0 + timedelta(days=2, hours=1), "SCHEDULED")


def _in_maintenance(snap: Snapshot, window: MaintenanceWindow | None) -> Snapshot:
    """`snap` with its one node announcing `window`."""
    [(key, node)] = snap.nodes.items()
    return replace(snap, nodes=frozen_mapping({key: replace(node, maintenance=window)}))


def test_a_slot_s_next_maintenance_window_start_is_a_gauge() -> None:
    m = DaemonMetrics()
    m.set_nodes(_in_maintenance(snapshot(), WINDOW), T0)
    start = WINDOW.start.timestamp() if WINDOW.start else None
    assert value(m, "tpucared_maintenance_window_start_seconds", fleet="f", slot="0") == start
    m.set_nodes(snapshot(), T0)  # the window is over: no series
    assert value(m, "tpucared_maintenance_window_start_seconds", fleet="f", slot="0") is None


def _ledger_records(snap: Snapshot) -> LedgerRecords:
    """The ledger's records of `snap`'s slot f/0: its one node, READY since T0."""
    node = NodeTimes(1, "f-0", "z", "v4-8", T0, ready_at=T0)
    return LedgerRecords(dict(snap.fleets), list(snap.slots.values()), {("f", 0): [node]})


def test_docs_list_exactly_the_families_with_their_types_and_labels() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    rows = re.findall(r"^\| `(tpucared_\w+)` \| (\w+) \|([^|]*)\|", doc, re.M)
    documented = {name: (kind, re.findall(r"`(\w+)`", labels)) for name, kind, labels in rows}
    m = DaemonMetrics(prices=Prices({("v4", "spot"): 1.0}))
    # A sample in every family, so that each shows its label names.
    m.api_request("nodes.list", "200", 0.1)
    m.record_create(CreateAttemptRecord("f", 0, "z-a", "v4-8", T0, "ok"))
    m.set_nodes(_in_maintenance(snapshot(running=True), WINDOW), T0)
    m.ledger.recompute(("f", 0), _ledger_records(snapshot()), T0 + timedelta(hours=1))
    m.set_zones([("", "z-a")], {})
    lost: dict[str, object] = {
        "from": "ready",
        "slot_update": {"add_preemptions": 1},
        "cause": "preempted",
    }
    steps: list[tuple[int, str, dict[str, object]]] = [
        (1, "node.dead", lost),
        (2, "attempt.preempted", {}),
        (3, "node.deleting", {"delete_calls": 1}),
        (4, "node.ready", {}),
        (5, "node.run_ended", {}),
    ]
    m.observe_events(
        EventRecord(n, T0, kind, "", fleet="f", slot=0, details=details)
        for n, kind, details in steps
    )
    exposed = {}
    for family in m.registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = [k for s in family.samples[:1] for k in s.labels if k != "le"]
        exposed[name] = (family.type, labels)
    assert {n: kind for n, (kind, _) in documented.items()} == {
        n: kind for n, (kind, _) in exposed.items()
    }
    for name, (_, labels) in exposed.items():
        assert documented[name][1] == labels, name


def test_a_flex_start_run_end_is_counted_and_is_no_preemption() -> None:
    """`node.run_ended` counts in tpucared_flex_runs_ended_total; the node.dead beside it
    adds no preemption and starts no recovery wait."""
    m = DaemonMetrics()
    ended: dict[str, object] = {
        "from": "ready",
        "end_reason": "run ended",
        "slot_update": {"add_preemptions": 0},
    }
    steps: list[tuple[int, str, dict[str, object]]] = [
        (1, "node.dead", ended),
        (2, "node.run_ended", {}),
        (3, "node.ready", {}),
    ]
    m.observe_events(
        EventRecord(n, T0 + timedelta(minutes=n), kind, "", fleet="f", slot=0, details=details)
        for n, kind, details in steps
    )
    assert value(m, "tpucared_flex_runs_ended_total", fleet="f") == 1
    assert value(m, "tpucared_preemptions_total", fleet="f") is None
    assert value(m, "tpucared_recovery_seconds_count", fleet="f") is None


def test_losses_are_counted_by_cause_once_each() -> None:
    """`tpucared_losses_total{fleet,cause}`: a node event's `cause` (one event per loss, the
    store's rule), and `crash` from the attempts ended failed or hung; a node replaced after
    a crash is not a second crash."""
    m = DaemonMetrics()
    steps: list[tuple[int, str, dict[str, object]]] = [
        (1, "node.dead", {"from": "ready", "cause": "preempted"}),
        (2, "node.deleting", {"delete_calls": 1}),
        (3, "node.deleting", {"from": "ready", "cause": "deleted_outside"}),
        (4, "node.dead", {"from": "ready", "cause": "maintenance"}),
        (5, "node.dead", {"from": "ready", "cause": "preempted"}),
        (6, "attempt.failed", {}),
        (7, "attempt.hung", {}),
        (8, "attempt.preempted", {}),
        (9, "node.deleting", {"from": "ready", "cause": "crash"}),
        (10, "workload.job_failed", {"cause": "preempted"}),
    ]
    m.observe_events(
        EventRecord(n, T0, kind, "", fleet="f", slot=0, details=details)
        for n, kind, details in steps
    )
    counts = {
        cause: value(m, "tpucared_losses_total", fleet="f", cause=cause)
        for cause in ("preempted", "deleted_outside", "maintenance", "crash", "stuck")
    }
    assert counts == {
        "preempted": 2,
        "deleted_outside": 1,
        "maintenance": 1,
        "crash": 2,
        "stuck": None,
    }
