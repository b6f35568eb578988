"""The daemon's parts in this process, against the emulator and a real SQLite file, one tick at a
time: the executor records exactly what tests/core/planning/executor_contract.py's `apply_intent`
says and before any cloud call; nodes found with our labels are adopted, never recreated; the
operation watcher records a create's fate as a fact, only on the phase it belongs to; calls cut
short by a stop get their outcome recorded at the next start."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from runtime_support import OWNER, PROJECT, ZONE, Control, query, write_config

from tests.core.planning.executor_contract import apply_intent
from tpucared.config import load_config
from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import CapacityKind, ErrorKind, Provisioning
from tpucared.core.vocab.actions import Adopt, CreateNode, DeleteNode, OpenSlot, Transition
from tpucared.core.vocab.plan import Plan
from tpucared.gcp import NoAuth
from tpucared.gcp.tpu import TpuClient, TpuCloud
from tpucared.gcp.tpu.bodies import NodeShape
from tpucared.runtime.daemon import Daemon
from tpucared.runtime.nodes.calls import NodeTemplate
from tpucared.runtime.nodes.executor import OVER_BUDGET, RECORD_BATCH, Executor
from tpucared.runtime.nodes.interrupted import record_interrupted_calls
from tpucared.runtime.nodes.records import OutcomeKind
from tpucared.runtime.reconciler import Tick
from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head

P = NodePhase


@dataclass
class Harness:
    daemon: Daemon
    store: Store
    db: Path

    async def tick(self) -> Tick:
        return await self.daemon.reconciler.tick("test")

    async def calls_done(self) -> None:
        await self.daemon.tasks.drain(self.daemon.clock, 10.0)

    async def run_watcher(self, seconds: float) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(self.daemon.watcher.run(stop))
        await asyncio.sleep(seconds)
        stop.set()
        await task


@contextlib.asynccontextmanager
async def harness(tmp_path: Path, control: Control, **kwargs: Any) -> AsyncIterator[Harness]:
    config = load_config(write_config(tmp_path, control.emulator.url, **kwargs))
    await upgrade_to_head(config.daemon.db)
    store = Store.open(config.daemon.db)
    client = TpuClient(config.gcp.endpoint, token_source=NoAuth())
    template = NodeTemplate(PROJECT, {"ssh-keys": "tpucared:ssh-ed25519 AAAA tpucared"}, True)
    try:
        daemon = Daemon(config, store, {"tpu": TpuCloud(client)}, template)
        yield Harness(daemon, store, tmp_path / "state.db")
    finally:
        await client.aclose()
        await store.close()


def _comparable(snapshot: Any) -> dict[str, Any]:
    """Fleets, slots (run ids aside: the store makes random ones) and live incarnations."""
    return {
        "fleets": dict(snapshot.fleets),
        "slots": {k: replace(s, run_id="") for k, s in snapshot.slots.items()},
        "nodes": dict(snapshot.nodes),
    }


async def test_the_executor_records_what_apply_intent_says_before_any_call(
    tmp_path: Path, control: Control
) -> None:
    # Cloud calls take a second: everything below happens while they are in flight.
    await control.faults({"latency_ms": 1000, "paths": ["/nodes"], "methods": ["POST", "DELETE"]})
    async with harness(tmp_path, control) as h:
        tick = await h.tick()
        assert len(tick.plan.of(CreateNode)) == 3
        stored = await h.store.load_snapshot()
        expected = apply_intent(tick.snapshot, tick.plan, tick.plan.now)
        assert _comparable(stored) == _comparable(expected)
        assert {n.phase for n in stored.nodes.values()} == {P.REQUESTED}
        assert [r for r in await control.requests() if r["method"] == "POST"] == []

        await h.calls_done()  # the creates return: REQUESTED -> CREATING with the operation
        after = await h.store.load_snapshot()
        assert {n.phase for n in after.nodes.values()} == {P.CREATING}
        assert all(n.operation for n in after.nodes.values())

        await h.run_watcher(1.0)  # the operations end
        tick = await h.tick()
        assert [a.new for a in tick.plan.of(Transition)] == [P.READY] * 3
        assert _comparable(await h.store.load_snapshot()) == _comparable(
            apply_intent(tick.snapshot, tick.plan, tick.plan.now)
        )

        # A preemption: DEAD, then DELETING recorded before the (slow) delete call.
        await control.node_action("sweep-1", "preempt")
        tick = await h.tick()
        assert [type(a) for a in tick.plan.actions] == [Transition, DeleteNode]
        stored = await h.store.load_snapshot()
        expected = apply_intent(tick.snapshot, tick.plan, tick.plan.now)
        assert _comparable(stored) == _comparable(expected)
        assert stored.nodes[("sweep", 1, 0)].phase is P.DELETING
        assert stored.nodes[("sweep", 1, 0)].delete_calls == 1
        assert [r for r in await control.requests() if r["method"] == "DELETE"] == []
        await h.calls_done()


async def test_nodes_with_our_labels_are_adopted_not_recreated(
    tmp_path: Path, control: Control
) -> None:
    """The database was lost (or never had them): what the lists show with our labels is
    taken on as it is, without a single create."""
    await _create_ours(control, 3)
    requests_before = len(await control.requests())
    async with harness(tmp_path, control) as h:
        tick = await h.tick()
        assert len(tick.plan.of(Adopt)) == 3
        assert tick.plan.of(CreateNode) == ()
        stored = await h.store.load_snapshot()
        assert {k: n.phase for k, n in stored.nodes.items()} == {
            ("sweep", s, 0): P.READY for s in range(3)
        }
        tick = await h.tick()
        assert tick.plan.actions == ()
    mutating = [r for r in (await control.requests())[requests_before:] if r["method"] != "GET"]
    assert mutating == []


async def test_our_nodes_beyond_the_fleets_size_are_adopted_and_deleted(
    tmp_path: Path, control: Control
) -> None:
    """A fresh database, three nodes of ours, a fleet of one: the two beyond its size have
    no slot record yet; they are adopted all the same, to be deleted (a regression: their
    adoption used to fail on the missing slot, every tick, and leak them)."""
    await _create_ours(control, 3)
    async with harness(tmp_path, control, size=1) as h:
        tick = await h.tick()
        adopts = {a.node_name: a.phase for a in tick.plan.of(Adopt)}
        assert adopts == {"sweep-0": P.READY, "sweep-1": P.DEAD, "sweep-2": P.DEAD}
        assert tick.execution.skipped == 0
        await _converge(h, 1)
    assert sorted(n["node_id"] for n in await control.nodes()) == ["sweep-0"]


async def _create_ours(control: Control, n: int) -> None:
    async with TpuClient(control.emulator.url, token_source=NoAuth()) as client:
        for slot in range(n):
            await client.create_node(
                PROJECT,
                ZONE,
                f"sweep-{slot}",
                NodeShape(
                    accelerator_type="v4-8",
                    extra={"runtime_version": "tpu-ubuntu2204-base"},
                    capacity=CapacityKind.SPOT,
                    labels={"tpucared-fleet": "sweep", "tpucared-owner": OWNER},
                ),
            )
    await asyncio.sleep(0.5)  # READY


async def test_a_stockout_is_recorded_as_a_fact_with_its_message(
    tmp_path: Path, control: Control
) -> None:
    await control.capacity(0)
    async with harness(tmp_path, control, size=1) as h:
        await h.tick()
        await h.calls_done()
        await h.run_watcher(1.0)
        inc = (await h.store.load_snapshot()).nodes[("sweep", 0, 0)]
        assert inc.phase is P.CREATING  # the executor decides nothing
        assert inc.error is ErrorKind.CAPACITY
        assert inc.operation is None
        (attempt,) = query(h.db, "SELECT * FROM create_attempts")
        assert attempt["outcome"] == "capacity"
        assert "There is no more capacity in the zone" in attempt["message"]
        assert attempt["latency_s"] > 0
        assert h.daemon.wakeup.pending  # the loop plans at once, not at the next poll

        tick = await h.tick()  # the planner decides: FAILED, with the capacity backoff
        (failed,) = tick.plan.of(Transition)
        assert failed.new is P.FAILED
        assert failed.slot_update is not None
        assert failed.slot_update.next_create_at is not None
        assert tick.next_hold_lifts is not None  # in a one-zone fleet, the backoff's end
        slot = (await h.store.load_snapshot()).slots[("sweep", 0)]
        assert "no more capacity" in (slot.last_error or "")


async def test_a_create_failure_that_arrives_after_the_node_died_is_not_a_delete_failure(
    tmp_path: Path, control: Control
) -> None:
    # Deletes hang: the incarnation stays DELETING with the create's operation recorded.
    await control.faults({"latency_ms": 1500, "paths": ["/nodes"], "methods": ["DELETE"]})
    async with harness(tmp_path, control, size=1) as h:
        await h.tick()
        await h.calls_done()
        await control.node_action("sweep-0", "preempt")  # while CREATING: its operation fails
        tick = await h.tick()
        assert [type(a) for a in tick.plan.actions][-1] is DeleteNode
        await h.run_watcher(1.0)
        inc = (await h.store.load_snapshot()).nodes[("sweep", 0, 0)]
        assert inc.phase is P.DELETING
        assert inc.operation is None  # the create's operation ended ...
        assert inc.error is None  # ... and its failure is not taken for the delete's
        (attempt,) = query(h.db, "SELECT * FROM create_attempts")
        assert attempt["outcome"] == "transient"
        await h.daemon.tasks.cancel()


async def test_calls_cut_short_by_a_stop_get_an_outcome_at_the_next_start(
    tmp_path: Path, control: Control
) -> None:
    async with harness(tmp_path, control) as h:
        now = h.daemon.clock.now()
        async with h.store.write() as tx:
            await tx.record_fleet("sweep", "h", "{}", now)
            for slot in range(3):
                await tx.open_slot("sweep", slot, now)
            requested = await tx.request_node("sweep", 0, "sweep-0", ZONE, "v4-8", now)
            deleting = await tx.request_node("sweep", 1, "sweep-1", ZONE, "v4-8", now)
            await tx.begin_delete(deleting.id, P.REQUESTED, now)
            failed = await tx.request_node("sweep", 2, "sweep-2", ZONE, "v4-8", now)
            await tx.record_outcome(failed.id, P.REQUESTED, now, error=ErrorKind.QUOTA)
        changed = await record_interrupted_calls(h.store, h.daemon.clock)
        assert sorted(i.id for i in changed) == [requested.id, deleting.id]
        nodes = (await h.store.load_snapshot()).nodes
        assert nodes[("sweep", 0, 0)].error is ErrorKind.TRANSIENT
        assert nodes[("sweep", 1, 0)].error is ErrorKind.TRANSIENT
        assert nodes[("sweep", 2, 0)].error is ErrorKind.QUOTA  # had its outcome: untouched
        assert (await record_interrupted_calls(h.store, h.daemon.clock)) == []


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    # Slow enough creates that a node can be preempted while CREATING.
    return {**emulator_options, "create_seconds": 0.3}


async def _converge(h: Harness, size: int) -> None:
    for _ in range(20):
        await h.tick()
        await h.calls_done()
        await h.run_watcher(0.3)
        nodes = (await h.store.load_snapshot()).nodes
        if len(nodes) == size and all(n.phase is P.READY for n in nodes.values()):
            return
    raise AssertionError("the fleet did not converge")


async def test_scaling_down_deletes_the_highest_slots_and_a_removed_fleet_is_left_alone(
    tmp_path: Path, control: Control
) -> None:
    async with harness(tmp_path, control, size=3) as h:
        await _converge(h, 3)

    async with harness(tmp_path, control, size=1) as h:
        tick = await h.tick()
        deletes = tick.plan.of(DeleteNode)
        assert [d.node_name for d in deletes] == ["sweep-2", "sweep-1"]  # highest first
        assert {d.end_reason for d in deletes} == {"scaled down: fleet sweep has size 1"}
        await _converge(h, 1)

    # The fleet is gone from the config: its node is left alone, and a person is told.
    async with harness(tmp_path, control, fleet="other", size=0) as h:
        tick = await h.tick()
        assert tick.plan.of(DeleteNode) == ()
        (notice,) = query(h.db, "SELECT * FROM events WHERE kind = 'notice'")
        assert notice["fleet"] == "sweep"
        assert "fleet sweep is not in the config but owns 1 node(s)" in notice["message"]
        assert "left alone" in notice["message"]
        assert (await h.tick()).plan.actions == ()  # told once
    assert [n["state"] for n in await control.nodes() if n["node_id"] == "sweep-0"] == ["READY"]


async def test_queued_provisioning_creates_and_replaces_through_queued_resources(
    tmp_path: Path, control: Control
) -> None:
    async with harness(tmp_path, control, size=1, provisioning="queued") as h:
        tick = await h.tick()
        (create,) = tick.plan.of(CreateNode)
        assert create.queued_resource == "sweep-0"
        await _converge(h, 1)
        first = (await h.store.load_snapshot()).nodes[("sweep", 0, 0)]
        assert first.queued_resource == "sweep-0"

        await control.node_action("sweep-0", "preempt")
        for _ in range(30):
            await h.tick()
            await h.calls_done()
            await h.run_watcher(0.3)
            now = (await h.store.load_snapshot()).nodes.get(("sweep", 0, 0))
            if now is not None and now.id != first.id and now.phase is P.READY:
                break
        else:
            raise AssertionError("the preempted queued node was not replaced")
    requests = await control.requests()
    qr = [r for r in requests if "/queuedResources" in r["path"] and r["method"] != "GET"]
    assert [r["method"] for r in qr] == ["POST", "DELETE", "POST"]
    assert [r["query"].get("force") for r in qr if r["method"] == "DELETE"] == ["true"]
    assert [r for r in requests if r["path"].endswith("/nodes") and r["method"] == "POST"] == []


async def test_a_tick_spends_its_budget_and_leaves_the_rest_to_the_next(
    tmp_path: Path, control: Control
) -> None:
    async with harness(tmp_path, control, size=0) as h:
        await h.tick()  # the fleet's record, which the slots belong to
        now = datetime.now(UTC)
        slots = range(10, 10 + RECORD_BATCH + 5)
        actions = tuple(OpenSlot(reason="test", fleet="sweep", slot=s) for s in slots)
        execution = await Executor(h.store, h.daemon.calls, budget=0.0).execute(Plan(now, actions))
        left = [a for a, outcome in execution.outcomes if outcome.kind is OutcomeKind.POSTPONED]
        assert len(left) == 5  # the first batch always runs; the budget stops the next
        assert execution.outcomes[-1][1] == OVER_BUDGET
        stored = {s for (s,) in query(h.db, "SELECT slot FROM slots WHERE slot >= 10")}
        assert stored == set(slots[:RECORD_BATCH])


async def test_a_spent_budget_still_sends_the_plans_creates(
    tmp_path: Path, control: Control
) -> None:
    """A storm's deletes and transitions filled every tick's budget; the creates, last in a
    plan, were postponed tick after tick and the fleet did not come back. They run anyway."""
    async with harness(tmp_path, control, size=0) as h:
        await h.tick()
        now = datetime.now(UTC)
        first = [OpenSlot(reason="test", fleet="sweep", slot=s) for s in range(RECORD_BATCH)]
        later = [OpenSlot(reason="test", fleet="sweep", slot=s) for s in range(500, 505)]
        create = CreateNode(
            reason="test",
            fleet="sweep",
            slot=0,
            node_name="sweep-0",
            zone=ZONE,
            accelerator_type="v5litepod-8",
            extra={"runtime_version": "v2-alpha-tpuv5-lite"},
            capacity=CapacityKind.SPOT,
            provisioning=Provisioning.DIRECT,
            labels={"tpucared-fleet": "sweep", "tpucared-owner": OWNER},
            queued_resource=None,
            attempt=1,
        )
        plan = Plan(now, (*first, *later, create))
        execution = await Executor(h.store, h.daemon.calls, budget=0.0).execute(plan)
        outcomes = {id(a): o for a, o in execution.outcomes}
        assert [outcomes[id(a)] for a in later] == [OVER_BUDGET] * len(later)
        assert outcomes[id(create)].kind is OutcomeKind.DONE
        await h.calls_done()
        sent = [r for r in await control.requests() if r["method"] == "POST"]
        assert [r["path"].rsplit("/", 1)[-1] for r in sent] == ["nodes"]  # the one create
        rows = query(h.db, "SELECT node_name, phase FROM nodes")
        assert [(r["node_name"], r["phase"]) for r in rows] == [("sweep-0", "creating")]


async def test_the_create_rate_holds_what_the_last_minutes_sends_fill(
    tmp_path: Path, control: Control
) -> None:
    """`policy.creates_per_minute` (issue 31): the daemon remembers when it sent each create;
    with a rate of 2, a 4-slot fleet sends 2 creates, and the next tick still holds the other
    two slots, for the rate, until the first sends are a minute old."""
    async with harness(tmp_path, control, size=4, policy={"creates_per_minute": 2}) as h:
        first = await h.tick()
        await h.calls_done()
        assert [c.slot for c in first.plan.of(CreateNode)] == [0, 1]
        second = await h.tick()
        assert not second.plan.of(CreateNode)
        held = {hold.slot: hold for hold in second.plan.holds}
        assert set(held) == {2, 3}
        assert all("create rate: 2 creates in the last minute" in h.reason for h in held.values())
        sent = h.daemon.calls.creates_sent()
        assert [len(times) for times in sent.values()] == [2]
        (until,) = {hold.until for hold in held.values()}
        assert until is not None
        assert until == min(next(iter(sent.values()))) + timedelta(minutes=1)
        posts = [r for r in await control.requests() if r["method"] == "POST"]
        assert len(posts) == 2
