"""The executor's batches (runtime/nodes/executor.py): a batch's actions share one commit and
their savepoints (`Tx.apply_each`), runs of compare-and-sets are written at once
(`Tx.cas_many`), and a refused or conflicting action is undone alone, its call never sent.
Against the emulator, through the daemon's own store and calls (test_inprocess.py's harness)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from runtime_support import Control, query
from sqlalchemy import event
from test_inprocess import harness

from tpucared.core.model.records import NodePhase
from tpucared.core.vocab.actions import CreateNode, DeleteNode, OpenSlot, Transition
from tpucared.core.vocab.plan import Plan
from tpucared.runtime.nodes.executor import RECORD_BATCH, Executor
from tpucared.runtime.nodes.records import OutcomeKind
from tpucared.store import StaleWrite, Tx
from tpucared.store.write_many import ConcurrentChange

P = NodePhase


async def test_a_savepoint_undoes_its_part_alone_and_the_rest_commits(
    tmp_path: Path, control: Control
) -> None:
    """The executor's batches rely on SAVEPOINT inside our BEGIN IMMEDIATE transactions (the
    sqlite3 module's own transaction handling is off: store/engine.py)."""
    async with harness(tmp_path, control) as h:
        now = datetime.now(UTC)
        async with h.store.write() as tx:
            await tx.record_fleet("sweep", "h", "{}", now)

            async def lose_a_race() -> None:
                async with tx.savepoint():
                    await tx.open_slot("sweep", 0, now)
                    raise StaleWrite("slot", "a", "b")

            with pytest.raises(StaleWrite):
                await lose_a_race()
            await tx.open_slot("sweep", 1, now)
        slots = [tuple(r) for r in query(h.db, "SELECT slot FROM slots ORDER BY slot")]
        assert slots == [(1,)]
        kinds = [tuple(r) for r in query(h.db, "SELECT kind, slot FROM events ORDER BY id")]
        assert ("slot.opened", 0) not in kinds
        assert ("slot.opened", 1) in kinds


async def test_record_only_actions_share_a_commit_and_a_stale_one_is_skipped_alone(
    tmp_path: Path, control: Control
) -> None:
    """Adopting 10,000 nodes is 20,000 record-only actions: one WAL sync each took minutes.
    They commit in batches of RECORD_BATCH, each action as if in its own savepoint, so a stale one
    is skipped and the others stand; a cloud action's intent still commits before its call,
    after everything planned before it."""
    async with harness(tmp_path, control) as h:
        tick = await h.tick()  # three creates: REQUESTED incarnations to go stale against
        await h.calls_done()
        (first, *_) = tick.plan.of(CreateNode)
        inc = (await h.store.load_snapshot()).nodes[("sweep", first.slot, 0)]
        commits: list[int] = []
        event.listen(h.store.engine.sync_engine, "commit", lambda _conn: commits.append(1))
        now = datetime.now(UTC)
        slots = range(10, 10 + RECORD_BATCH + 6)
        stale = Transition(
            reason="test",
            incarnation_id=inc.id,
            node_name=inc.node_name,
            expected=P.READY,  # it is CREATING: the compare-and-set loses
            new=P.DEAD,
        )
        actions = [OpenSlot(reason="test", fleet="sweep", slot=s) for s in slots]
        actions.insert(3, stale)
        execution = await Executor(h.store, h.daemon.calls).execute(Plan(now, tuple(actions)))
        outcomes = dict((id(a), o) for a, o in execution.outcomes)
        assert outcomes[id(stale)].kind is OutcomeKind.STALE
        assert execution.skipped == 1
        assert len(execution.done) == len(slots)
        stored = {s for (s,) in query(h.db, "SELECT slot FROM slots WHERE slot >= 10")}
        assert stored == set(slots)
        (phase,) = query(h.db, f"SELECT phase FROM nodes WHERE id = {inc.id}")
        assert phase["phase"] == "creating"
        assert len(commits) == 2  # RECORD_BATCH + 7 actions: two transactions, not 263


async def test_cloud_intents_share_the_batch_commit_and_their_calls_start_after_it(
    tmp_path: Path, control: Control
) -> None:
    """A preemption storm's deletes: each intent in its own transaction (one WAL sync each,
    queued behind the calls' outcome writes) held a tick for 30 s. Now a batch's intents
    commit together, each in its own savepoint, and their calls start after the commit."""
    async with harness(tmp_path, control) as h:
        tick = await h.tick()
        await h.calls_done()
        snapshot = await h.store.load_snapshot()
        incs = [snapshot.nodes[("sweep", c.slot, 0)] for c in tick.plan.of(CreateNode)]
        commits: list[float] = []
        event.listen(
            h.store.engine.sync_engine, "commit", lambda _conn: commits.append(time.time())
        )
        now = datetime.now(UTC)
        deletes = [DeleteNode.of(inc, P.CREATING, reason="test") for inc in incs]
        slots = [OpenSlot(reason="test", fleet="sweep", slot=s) for s in (20, 21)]
        execution = await Executor(h.store, h.daemon.calls).execute(Plan(now, (*deletes, *slots)))
        assert len(execution.done) == len(deletes) + len(slots)
        assert len(commits) == 1  # three intents and two slots: one transaction
        await h.calls_done()
        sent = [r for r in await control.requests() if r["method"] == "DELETE"]
        assert len(sent) == len(deletes)
        assert min(float(r["time"]) for r in sent) >= commits[0]  # no call before its intent
        phases = {r["phase"] for r in query(h.db, "SELECT phase FROM nodes")}
        assert phases <= {"deleting", "deleted"}


async def test_a_refused_intent_among_others_sends_no_call_and_the_others_one_each(
    tmp_path: Path, control: Control
) -> None:
    """Actions share a savepoint (`Tx.apply_each`); when one is refused, the chunk is undone
    and run again, each alone: the intents noted the first time are forgotten, so each
    other delete is sent once, the refused one never, and its name is free again."""
    async with harness(tmp_path, control) as h:
        tick = await h.tick()
        await h.calls_done()
        snapshot = await h.store.load_snapshot()
        incs = [snapshot.nodes[("sweep", c.slot, 0)] for c in tick.plan.of(CreateNode)]
        now = datetime.now(UTC)
        deletes = [DeleteNode.of(inc, P.CREATING, reason="test") for inc in incs]
        stale = DeleteNode.of(incs[-1], P.READY, reason="test")  # it is CREATING: refused
        deletes[-1] = stale
        execution = await Executor(h.store, h.daemon.calls).execute(Plan(now, tuple(deletes)))
        outcomes = dict((id(a), o) for a, o in execution.outcomes)
        assert outcomes[id(stale)].kind is OutcomeKind.STALE
        assert len(execution.done) == len(deletes) - 1
        await h.calls_done()
        sent = [r["path"] for r in await control.requests() if r["method"] == "DELETE"]
        names = sorted(p.rsplit("/", 1)[-1] for p in sent)
        assert names == sorted(d.node_name for d in deletes[:-1])  # each once, not the refused
        assert not h.daemon.calls.busy(stale.incarnation_id)
        assert not h.daemon.calls.name_busy(stale)


async def test_a_run_that_meets_a_concurrent_change_is_applied_action_by_action(
    tmp_path: Path, control: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Tx.cas_many` raises ConcurrentChange when a row changed between its read and its
    write (the lock should make that impossible): the executor undoes the run, forgets its
    intents, and applies it one action at a time, each delete still sent once."""
    async with harness(tmp_path, control) as h:
        tick = await h.tick()
        await h.calls_done()
        snapshot = await h.store.load_snapshot()
        incs = [snapshot.nodes[("sweep", c.slot, 0)] for c in tick.plan.of(CreateNode)]

        async def conflict(self: Tx, actions: object, now: datetime) -> list[object]:
            raise ConcurrentChange("1 of 3 rows")

        monkeypatch.setattr(Tx, "cas_many", conflict)
        deletes = [DeleteNode.of(inc, P.CREATING, reason="test") for inc in incs]
        plan = Plan(datetime.now(UTC), tuple(deletes))
        execution = await Executor(h.store, h.daemon.calls).execute(plan)
        assert len(execution.done) == len(deletes)
        await h.calls_done()
        sent = [r["path"] for r in await control.requests() if r["method"] == "DELETE"]
        assert sorted(p.rsplit("/", 1)[-1] for p in sent) == sorted(d.node_name for d in deletes)
        phases = {r["phase"] for r in query(h.db, "SELECT phase FROM nodes")}
        assert phases <= {"deleting", "deleted"}
