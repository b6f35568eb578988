"""`Tx.cas_many` (write_many.py): a run of Transition and DeleteNode intents written in a few
statements, exactly as `transition` and `begin_delete` write each alone, on SQLite and
PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import event
from store_support import ENGINES, T0, facts, seed, slot_update

from tpucared.core.model.lifecycle import IllegalTransition
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.vocab.actions import CloudFacts, DeleteNode, RecordCloud, Transition
from tpucared.store import KEEP, NotFound, StaleWrite, Store, Tx

P = NodePhase


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _ready(store: Store, fleet: str, size: int) -> list[IncarnationRecord]:
    """`size` READY incarnations in fleet `fleet`."""
    await seed(store, fleet, size, T0)
    async with store.write() as tx:
        incs = [
            await tx.request_node(fleet, s, f"{fleet}-{s}", "z-a", "v4-8", T0) for s in range(size)
        ]
        for inc in incs:
            await tx.transition(inc.id, P.REQUESTED, P.CREATING, T0)
            await tx.transition(inc.id, P.CREATING, P.READY, T0, cloud=facts())
        return [i for i in (await tx.incarnations(fleet)) if i.phase is P.READY]


def _actions(incs: list[IncarnationRecord]) -> list[Transition | DeleteNode]:
    """What a storm tick asks of them: preempted (with the slot's count), the delete intent of
    the same incarnation right after, a delete of a READY one, and three refusals."""
    a, b, c, d, e = sorted(incs, key=lambda i: i.slot)
    preempted = facts("PREEMPTED")
    slot = slot_update(a.fleet, a.slot, add_preemptions=1, last_error="preempted")
    return [
        Transition(
            reason="preempted", incarnation_id=a.id, node_name=a.node_name, expected=P.READY,
            new=P.DEAD, end_reason="preempted", cloud=preempted, slot_update=slot,
        ),
        DeleteNode.of(replace(a, phase=P.DEAD), P.DEAD, reason="dead: delete it"),
        DeleteNode.of(b, P.READY, reason="unwanted", end_reason="scaled down"),
        Transition(  # stale: it is READY
            reason="x", incarnation_id=c.id, node_name=c.node_name, expected=P.CREATING,
            new=P.READY,
        ),
        Transition(  # not an edge of the lifecycle
            reason="x", incarnation_id=d.id, node_name=d.node_name, expected=P.READY,
            new=P.REQUESTED,
        ),
        DeleteNode.of(replace(e, id=e.id + 10_000), P.READY, reason="gone"),  # no such row
    ]  # fmt: skip


async def _one_by_one(tx: Tx, actions: list[Transition | DeleteNode]) -> list[object]:
    out: list[object] = []
    for action in actions:
        try:
            async with tx.savepoint():
                if isinstance(action, Transition):
                    end = action.end_reason if action.end_reason is not None else KEEP
                    out.append(
                        await tx.transition(
                            action.incarnation_id,
                            action.expected,
                            action.new,
                            T0,
                            reason=action.reason,
                            end_reason=end,
                            cloud=action.cloud,
                            slot_update=action.slot_update,
                        )
                    )
                else:
                    out.append(
                        await tx.begin_delete(
                            action.incarnation_id,
                            action.expected,
                            T0,
                            end_reason=action.end_reason,
                            reason=action.reason,
                        )
                    )
        except (StaleWrite, IllegalTransition, NotFound) as exc:
            out.append(exc)
    return out


def _same(record: object) -> object:
    """A result with what differs between two fleets taken out."""
    if isinstance(record, IncarnationRecord):
        return replace(record, id=0, fleet="", node_name="")
    return type(record)


def _statements(store: Store) -> list[str]:
    """Every statement the store sends from now on, appended as it goes."""
    statements: list[str] = []
    event.listen(
        store.engine.sync_engine, "before_cursor_execute",
        lambda _c, _cur, sql, *_a: statements.append(sql),
    )  # fmt: skip
    return statements


async def test_cas_many_writes_what_each_single_write_writes(store: Store):
    single, many = await _ready(store, "one", 5), await _ready(store, "many", 5)
    statements = _statements(store)
    async with store.write() as tx:
        expected = await _one_by_one(tx, _actions(single))
        statements.clear()
        got = await tx.cas_many(_actions(many), T0)
        bulk_statements = len(statements)
    assert [_same(r) for r in got] == [_same(r) for r in expected]
    assert [type(r) for r in got[3:]] == [StaleWrite, IllegalTransition, NotFound]
    assert bulk_statements <= 4  # read, rows, slots, workers of none: not two an action
    # The rows as stored and the slots' bookkeeping agree too.
    async with store.read() as r:
        rows = {f: [_same(i) for i in await r.incarnations(f)] for f in ("one", "many")}
        slots = {f: await r.slots(f) for f in ("one", "many")}
        events = await r.events(since_id=0, limit=1000)
    assert rows["one"] == rows["many"]
    assert [(s.index, s.preemptions, s.last_error) for s in slots["one"]] == [
        (s.index, s.preemptions, s.last_error) for s in slots["many"]
    ]
    assert slots["many"][0].preemptions == 1
    deleting = got[1]
    assert isinstance(deleting, IncarnationRecord)
    assert deleting.delete_calls == 1
    assert deleting.phase is P.DELETING

    def kinds(fleet: str) -> list[tuple[str, str, object]]:
        return [
            (e.kind, e.message, {k: v for k, v in e.details.items()})
            for e in events
            if e.fleet == fleet and e.id > max(x.id for x in events if x.kind == "node.ready")
        ]

    assert kinds("many") == kinds("one")
    assert [k for k, _, _ in kinds("many")] == ["node.dead", "node.deleting", "node.deleting"]


def _records(incs: list[IncarnationRecord]) -> list[Transition | DeleteNode | RecordCloud]:
    """RecordCloud in a run: a new health, the facts as recorded (nothing to write), new
    workers, one stale, and one after its incarnation's own delete intent in the same run."""
    a, b, c, d, e = sorted(incs, key=lambda i: i.slot)

    def record(inc: IncarnationRecord, expected: NodePhase, cloud: CloudFacts) -> RecordCloud:
        return RecordCloud(
            reason="", incarnation_id=inc.id, node_name=inc.node_name, expected=expected,
            cloud=cloud,
        )  # fmt: skip

    return [
        record(a, P.READY, facts(health="TIMEOUT")),
        record(b, P.READY, facts()),  # as recorded by `_ready`
        record(c, P.READY, facts(workers=2)),
        record(c, P.READY, facts(workers=2)),  # the workers the one before wrote: nothing
        record(d, P.DEAD, facts("PREEMPTED")),  # stale: it is READY
        DeleteNode.of(e, P.READY, reason="unwanted", end_reason="scaled down"),
        record(e, P.DELETING, facts("DELETING")),
    ]


async def _each(tx: Tx, actions: list[Transition | DeleteNode | RecordCloud]) -> list[object]:
    out: list[object] = []
    for action in actions:
        if not isinstance(action, RecordCloud):
            out += await _one_by_one(tx, [action])
            continue
        try:
            async with tx.savepoint():
                out.append(
                    await tx.record_cloud(
                        action.incarnation_id, action.expected, action.cloud, T0,
                        reason=action.reason,
                    )
                )  # fmt: skip
        except StaleWrite as exc:
            out.append(exc)
    return out


async def test_cas_many_records_cloud_facts_as_record_cloud_does(store: Store):
    single, many = await _ready(store, "one", 5), await _ready(store, "many", 5)
    statements = _statements(store)
    async with store.write() as tx:
        expected = await _each(tx, _records(single))
        got = await tx.cas_many(_records(many), T0)
        statements.clear()
        plain = [a for a in _records(many) if isinstance(a, RecordCloud) and not a.cloud.endpoints]
        await tx.cas_many(plain, T0)  # facts without workers: a read and an UPDATE at most
        assert len(statements) <= 2
    assert [_same(r) for r in got] == [_same(r) for r in expected]
    assert type(got[4]) is StaleWrite
    async with store.read() as r:
        rows = {f: [_same(i) for i in await r.incarnations(f)] for f in ("one", "many")}
        ids = {f: [i.id for i in await r.incarnations(f)] for f in ("one", "many")}
        workers = {f: await r.workers(ids[f]) for f in ("one", "many")}
        events = await r.events(since_id=0, limit=1000)
    assert rows["one"] == rows["many"]
    addresses = {
        f: [[(w.index, w.internal_ip) for w in ws] for _, ws in sorted(workers[f].items())]
        for f in ("one", "many")
    }
    assert addresses["one"] == addresses["many"]
    assert any(len(ws) == 2 for ws in workers["many"].values())

    def told(fleet: str) -> list[tuple[str, str, object]]:
        last_ready = max(x.id for x in events if x.kind == "node.ready")
        return [
            (e.kind, e.message.replace(fleet, "F"), e.details)
            for e in events
            if e.fleet == fleet and e.id > last_ready
        ]

    assert told("many") == told("one")
    # a new health, new workers, the delete intent and the deleting node's new state.
    assert [k for k, _, _ in told("many")] == [
        "node.cloud", "node.cloud", "node.deleting", "node.cloud",
    ]  # fmt: skip
