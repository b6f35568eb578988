"""Helpers shared by the store tests and their subprocess workers (store_worker.py)."""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tpucared.core.model.lifecycle import LIVE_PHASES, TRANSITIONS
from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.vocab.actions import CloudFacts, SlotUpdate
from tpucared.store import Store

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

# The engines a module's tests run on when it overrides conftest.py's `engine_kind` fixture with
# these params; `@SQLITE_ONLY` keeps one of its tests that reads the SQLite file on SQLite.
ENGINES = ["sqlite", "postgresql"]
SQLITE_ONLY = pytest.mark.parametrize("engine_kind", ["sqlite"])
P = NodePhase


async def seed(store: Store, fleet: str, size: int, now: datetime) -> None:
    async with store.write() as tx:
        await tx.record_fleet(fleet, f"hash-{fleet}", json.dumps({"name": fleet}), now)
        await tx.ensure_slots(fleet, size, now)


async def ready_nodes(store: Store, size: int = 2, at: datetime = T0) -> list[IncarnationRecord]:
    """Fleet "f" of `size` slots (seeded), each with a node requested at T0 and READY `at`."""
    await seed(store, "f", size, T0)
    async with store.write() as tx:
        incs = [await tx.request_node("f", s, f"f-{s}", "z-a", "v4-8", T0) for s in range(size)]
        for inc in incs:
            await tx.transition(inc.id, P.REQUESTED, P.CREATING, T0)
            await tx.transition(inc.id, P.CREATING, P.READY, at, cloud=facts())
    return incs


def facts(
    state: str = "READY",
    since: datetime = T0,
    *,
    health: str | None = None,
    cloud_id: str | None = "4242",
    workers: int | None = None,
) -> CloudFacts:
    endpoints = (
        None
        if workers is None
        else tuple(WorkerEndpoint(i, f"10.0.0.{i + 1}", None) for i in range(workers))
    )
    return CloudFacts(
        cloud_state=state,
        cloud_state_since=since,
        health=health,
        unhealthy_since=None,
        cloud_id=cloud_id,
        create_time=since,
        endpoints=endpoints,
    )


def slot_update(
    fleet: str,
    slot: int,
    *,
    create_failures: int = 0,
    add_preemptions: int = 0,
    last_error: str | None = None,
    next_create_at: datetime | None = None,
) -> SlotUpdate:
    return SlotUpdate(
        fleet=fleet,
        slot=slot,
        create_failures=create_failures,
        next_create_at=next_create_at,
        next_zone=None,
        last_error=last_error,
        add_preemptions=add_preemptions,
    )


def hours(h: float) -> timedelta:
    return timedelta(hours=h)


# -- invariants, checked with the stdlib sqlite3 module (independent of the code under test) --

LIVE = {p.value for p in LIVE_PHASES}


def open_raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=10)
    conn.row_factory = sqlite3.Row
    return conn


def check_invariants(path: Path) -> dict[str, int]:
    """Everything that must hold after any crash; returns a few counts for progress checks.
    Raises AssertionError naming the broken invariant."""
    conn = open_raw(path)
    try:
        return _check(conn)
    finally:
        conn.close()


def _check(conn: sqlite3.Connection) -> dict[str, int]:
    q = conn.execute
    assert q("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert q("PRAGMA foreign_key_check").fetchall() == []

    # Every incarnation: its phase events form a legal path that ends in its phase, and its
    # delete calls were each recorded.
    paths: dict[int, list[str]] = defaultdict(list)
    delete_events: dict[int, int] = defaultdict(int)
    for row in q(
        "SELECT node_id, json_extract(details, '$.to') AS to_phase,"
        " json_extract(details, '$.delete_calls') AS delete_calls FROM events "
        "WHERE node_id IS NOT NULL AND to_phase IS NOT NULL ORDER BY id"
    ):
        paths[row["node_id"]].append(row["to_phase"])
        if row["delete_calls"] is not None:  # written by begin_delete only
            delete_events[row["node_id"]] += 1
            assert row["delete_calls"] == delete_events[row["node_id"]]
    nodes = q("SELECT * FROM nodes").fetchall()
    for node in nodes:
        path = paths[node["id"]]
        assert path[:1] == ["requested"], f"node {node['id']}: path {path}"
        for a, b in itertools.pairwise(path):
            again = a == b == "deleting"  # a repeated delete call
            assert again or P(b) in TRANSITIONS[P(a)], f"node {node['id']}: {a} -> {b}"
        assert path[-1] == node["phase"], f"node {node['id']}: {node['phase']} vs {path}"
        assert node["delete_calls"] == delete_events[node["id"]], f"node {node['id']}"
        assert node[f"{node['phase']}_at"] == node["phase_since"]

    # At most one live incarnation and one running attempt per slot.
    live = [(n["fleet"], n["slot"]) for n in nodes if n["phase"] in LIVE]
    assert len(live) == len(set(live)), "two live incarnations in a slot"

    # Slot counters agree with the rows and events they count.
    preempt: dict[tuple[str, int], int] = defaultdict(int)
    create_failures: dict[tuple[str, int], int] = {}
    for row in q(
        "SELECT fleet, slot, json_extract(details, '$.slot_update') AS su FROM events "
        "WHERE su IS NOT NULL ORDER BY id"
    ):
        su = json.loads(row["su"])
        preempt[(row["fleet"], row["slot"])] += su["add_preemptions"]
        create_failures[(row["fleet"], row["slot"])] = su["create_failures"]
    attempts: dict[tuple[str, int], list[sqlite3.Row]] = defaultdict(list)
    for a in q("SELECT * FROM workload_attempts ORDER BY number"):
        attempts[(a["fleet"], a["slot"])].append(a)
    attempt_events = {
        (r["kind"], r["attempt_id"])
        for r in q(
            "SELECT kind, json_extract(details, '$.attempt_id') AS attempt_id FROM events "
            "WHERE kind LIKE 'attempt.%'"
        )
    }
    for s in q("SELECT * FROM slots"):
        key = (s["fleet"], s["slot"])
        mine = attempts[key]
        assert [a["number"] for a in mine] == list(range(1, len(mine) + 1)), key
        assert s["attempts"] == len(mine), key
        assert s["failures"] == sum(a["outcome"] in ("failed", "hung") for a in mine), key
        assert sum(a["ended_at"] is None for a in mine) <= 1, key
        for a in mine:
            assert ("attempt.started", a["id"]) in attempt_events
            if a["outcome"] is not None:
                assert (f"attempt.{a['outcome']}", a["id"]) in attempt_events
        assert s["preemptions"] == preempt[key], key
        assert s["create_failures"] == create_failures.get(key, 0), key

    # Multi-row transactions are all there or not at all.
    batches: dict[str, list[int]] = defaultdict(list)
    for r in q(
        "SELECT json_extract(details, '$.batch') AS batch, json_extract(details, '$.size') AS n "
        "FROM events WHERE kind = 'test.batch'"
    ):
        batches[r["batch"]].append(r["n"])
    for batch, sizes in batches.items():
        assert len(sizes) == sizes[0], f"batch {batch}: {len(sizes)} of {sizes[0]} rows"

    return {
        "events": q("SELECT count(*) FROM events").fetchone()[0],
        "nodes": len(nodes),
        "attempts": sum(len(v) for v in attempts.values()),
        "batches": len(batches),
    }
