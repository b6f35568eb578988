"""`Tx.adopt_many` / `Tx.open_slots` write exactly what one `adopt` / `open_slot` per action
writes (a fleet found again after a lost database: thousands of adoptions in a few
statements), refuse what `adopt` refuses, action by action, and write the rest."""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_support import T0, facts, open_raw, seed

from tpucared.core.model.lifecycle import TRANSITIONS, IllegalTransition
from tpucared.core.model.records import NodePhase
from tpucared.core.vocab.actions import Adopt, OpenSlot
from tpucared.store import StaleWrite, Store
from tpucared.store.migrate import upgrade_to_head

P = NodePhase
_COPIES = itertools.count()
# Every phase an adoption may name in bulk (REQUESTED -> it is an edge; an adoption as
# REQUESTED is no edge and goes through `adopt` itself).
ADOPTABLE = sorted(TRANSITIONS[P.REQUESTED], key=lambda p: p.value)


def adopt(slot: int, phase: P = P.READY, *, name: str | None = None, **kw: Any) -> Adopt:
    return Adopt(
        reason=kw.pop("reason", ""),
        fleet=kw.pop("fleet", "sweep"),
        slot=slot,
        node_name=name or f"sweep-{slot}",
        zone=kw.pop("zone", "z-a"),
        accelerator_type="v4-32",
        phase=phase,
        queued_resource=kw.pop("queued_resource", None),
        cloud=kw.pop("cloud", facts(workers=2)),
        end_reason=kw.pop("end_reason", None),
        project=kw.pop("project", ""),
    )


async def one_by_one(store: Store, slots: list[OpenSlot], adopts: list[Adopt]) -> list[str]:
    """What the executor did before: each action alone, a refused one undone alone."""
    outcomes: list[str] = []
    async with store.write() as tx:
        for s in slots:
            await tx.open_slot(s.fleet, s.slot, T0, reason=s.reason)
        for a in adopts:
            try:
                async with tx.savepoint():
                    await tx.open_slot(a.fleet, a.slot, T0, reason=a.reason)
                    await tx.adopt(
                        a.fleet,
                        a.slot,
                        a.node_name,
                        a.zone,
                        a.accelerator_type,
                        a.phase,
                        a.cloud,
                        T0,
                        queued_resource=a.queued_resource,
                        end_reason=a.end_reason,
                        reason=a.reason,
                        project=a.project,
                    )
                outcomes.append("done")
            except (StaleWrite, IllegalTransition) as exc:
                outcomes.append(type(exc).__name__)
    return outcomes


async def at_once(store: Store, slots: list[OpenSlot], adopts: list[Adopt]) -> list[str]:
    async with store.write() as tx:
        await tx.open_slots(slots, T0)
        refusals = await tx.adopt_many(adopts, T0)
    return ["done" if r is None else type(r).__name__ for r in refusals]


LEFT_OUT = ("run_id", "version")


def tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the two ways must agree on (run ids are random, and versions count trigger
    firings, which differ by statement: left out)."""
    conn = open_raw(path)
    try:
        out = {}
        for table, order in [
            ("nodes", "id"),
            ("workers", "node_id, worker"),
            ("events", "id"),
            ("slots", "fleet, slot"),
        ]:
            rows = conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
            out[table] = [
                tuple(v for k, v in zip(r.keys(), tuple(r), strict=True) if k not in LEFT_OUT)
                for r in rows
            ]
        return out
    finally:
        conn.close()


async def both_ways(
    tmp_path: Path,
    slots: list[OpenSlot],
    adopts: list[Adopt],
    *,
    before: tuple[Adopt, ...] = (),
) -> tuple[list[str], dict[str, list[tuple[Any, ...]]]]:
    results = []
    template = tmp_path / "template.db"
    if not template.exists():  # migrating costs seconds: once per test, then copies
        await upgrade_to_head(template)
    for way in (one_by_one, at_once):
        db = tmp_path / f"{way.__name__}-{next(_COPIES)}.db"
        with (
            contextlib.closing(sqlite3.connect(template)) as src,
            contextlib.closing(sqlite3.connect(db)) as dst,
        ):
            src.backup(dst)
        store = Store.open(db)
        try:
            await seed(store, "sweep", 2, T0)
            await seed(store, "other", 1, T0)
            if before:
                await one_by_one(store, [], list(before))
            outcomes = await way(store, slots, adopts)
        finally:
            await store.close()
        results.append((outcomes, tables(db)))
    (old, old_rows), (new, new_rows) = results
    assert new == old
    for table in old_rows:
        assert new_rows[table] == old_rows[table], table
    return new, new_rows


async def test_the_same_rows_and_events_as_one_adopt_per_action(tmp_path: Path) -> None:
    adopts = [
        adopt(0),  # slot 0 exists (seeded)
        adopt(5, P.CREATING, cloud=facts("CREATING")),  # a new slot, opened with its event
        adopt(6, P.DEAD, end_reason="preempted", cloud=facts("PREEMPTED", workers=None)),
        adopt(7, P.READY, reason="found by the test", queued_resource="qr-7", project="p2"),
        adopt(0, fleet="other", name="other-0", zone="z-b"),
    ]
    outcomes, rows = await both_ways(tmp_path, [OpenSlot(reason="", fleet="sweep", slot=9)], adopts)
    assert outcomes == ["done"] * 5
    assert len(rows["nodes"]) == 5
    # Two each, none for the CREATING and the DEAD ones (no endpoints given: left alone).
    assert len(rows["workers"]) == 6


async def test_refusals_match_adopt_and_spare_the_others(tmp_path: Path) -> None:
    live = adopt(1, name="sweep-1")  # recorded before: its slot and its name are taken
    adopts = [
        adopt(0),
        adopt(1, name="sweep-1b"),  # the slot has a live incarnation
        adopt(3, name="sweep-1"),  # the name, in that zone, has one
        adopt(4, name="sweep-1", zone="z-b"),  # the same name in another zone is free
        adopt(0, name="sweep-0b"),  # slot 0 taken earlier in the same run
        adopt(8, P.DELETED),  # not an edge from REQUESTED
        adopt(9),
    ]
    assert P.DELETED not in TRANSITIONS[P.REQUESTED]
    outcomes, _ = await both_ways(tmp_path, [], adopts, before=(live,))
    assert outcomes == [
        "done",
        "LiveIncarnationExists",
        "LiveIncarnationExists",
        "done",
        "LiveIncarnationExists",
        "IllegalTransition",
        "done",
    ]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6),  # slot
            st.sampled_from(ADOPTABLE),
            st.integers(0, 3),  # name suffix: names collide across slots now and then
            st.sampled_from(["z-a", "z-b"]),
            st.integers(0, 2),  # workers
        ),
        max_size=12,
    ),
    st.lists(st.integers(0, 8), max_size=4),
)
async def test_any_run_of_adoptions_writes_what_one_by_one_writes(
    tmp_path: Path, drawn: list[tuple[int, P, int, str, int]], opened: list[int]
) -> None:
    adopts = [
        adopt(slot, phase, name=f"n-{suffix}", zone=zone, cloud=facts(workers=workers))
        for slot, phase, suffix, zone, workers in drawn
    ]
    slots = [OpenSlot(reason="", fleet="sweep", slot=s) for s in opened]
    await both_ways(tmp_path, slots, adopts)


async def test_ten_thousand_bound_parameters_are_chunked(tmp_path: Path) -> None:
    """SQLite caps bound parameters per statement: a run of thousands of slots is checked in
    chunks (the executor's runs are 256 actions; the store does not rely on that)."""
    slots = [OpenSlot(reason="", fleet="sweep", slot=s) for s in range(5000)]
    db = tmp_path / "many.db"
    await upgrade_to_head(db)
    store = Store.open(db)
    try:
        await seed(store, "sweep", 2, T0)
        async with store.write() as tx:
            await tx.open_slots(slots, T0)
            refusals = await tx.adopt_many([adopt(s) for s in range(0, 5000, 2)], T0)
    finally:
        await store.close()
    assert refusals == [None] * 2500
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM slots").fetchone() == (5000,)
        assert conn.execute("SELECT count(*) FROM nodes").fetchone() == (2500,)
    finally:
        conn.close()


@pytest.mark.parametrize("phase", ADOPTABLE)
async def test_every_adoptable_phase(tmp_path: Path, phase: P) -> None:
    await both_ways(tmp_path, [], [adopt(0, phase), adopt(3, phase, end_reason="vanished")])
