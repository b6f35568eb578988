"""Every query in docs/inspecting.md, run with the real sqlite3 shell against a database
migrated to head and filled through the store API, must return what the docs promise."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
from store_support import facts, hours, seed, slot_update

from tpucared.core.ledger.categories import Category, Phase
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, NodePhase
from tpucared.core.model.specs import ErrorKind
from tpucared.store import Store
from tpucared.store.snapshot import ZoneHealth

P = NodePhase
DOC = Path(__file__).resolve().parents[2] / "docs" / "inspecting.md"
Rows = list[dict[str, Any]]


def sql_blocks() -> dict[str, list[str]]:
    """```sql blocks by the heading above them."""
    blocks: dict[str, list[str]] = {}
    heading = ""
    pattern = re.compile(r"^(#+) (?P<heading>[^\n]*)$|^```sql\n(?P<sql>.*?)^```$", re.M | re.S)
    for match in pattern.finditer(DOC.read_text()):
        if match["heading"] is not None:
            heading = match["heading"].strip()
        else:
            blocks.setdefault(heading, []).append(match["sql"])
    return blocks


async def populate(store: Store, now: datetime) -> None:
    """Ten hours of a 4-slot fleet "sweep" and a 1-slot fleet "eval", ending `now`."""

    def at(h: float) -> datetime:
        return now - hours(h)  # h hours ago

    await seed(store, "sweep", 4, at(10))
    await seed(store, "eval", 1, at(2))
    async with store.write() as tx:
        # sweep/0: READY 9.5h..5.5h, preempted; recreated, READY since 5h, attempt 2 running.
        a = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-32", at(10))
        await tx.transition(a.id, P.REQUESTED, P.CREATING, at(10), operation="op-a")
        await tx.transition(a.id, P.CREATING, P.READY, at(9.5), cloud=facts(since=at(9.5)))
        run = await tx.start_attempt(a.id, at(9.4))
        await tx.finish_attempt(run.id, AttemptOutcome.PREEMPTED, at(5.5))
        await tx.transition(
            a.id,
            P.READY,
            P.DEAD,
            at(5.5),
            end_reason="preempted",
            slot_update=slot_update("sweep", 0, add_preemptions=1),
            cause=LossCause.PREEMPTED,
        )
        await tx.begin_delete(a.id, P.DEAD, at(5.45))
        await tx.transition(a.id, P.DELETING, P.DELETED, at(5.4))
        a2 = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-32", at(5.4))
        await tx.transition(a2.id, P.REQUESTED, P.READY, at(5), cloud=facts(since=at(5)))
        await tx.start_attempt(a2.id, at(4.9))

        # sweep/1: three stockouts in z-a, then READY in z-b since 1h.
        for h in (9, 8, 2):
            b = await tx.request_node("sweep", 1, "sweep-1", "z-a", "v4-32", at(h))
            await tx.record_create_attempt(
                CreateAttemptRecord(
                    "sweep",
                    1,
                    "z-a",
                    "v4-32",
                    at(h),
                    "capacity",
                    2.0,
                    f"no more capacity ({h}h ago)",
                    b.id,
                )
            )
            await tx.transition(b.id, P.REQUESTED, P.FAILED, at(h))
        b = await tx.request_node("sweep", 1, "sweep-1", "z-b", "v4-32", at(1.5))
        await tx.transition(b.id, P.REQUESTED, P.READY, at(1), cloud=facts(since=at(1)))

        # sweep/2: READY 9h..3h, preempted, not deleted yet (still live, phase dead).
        c = await tx.request_node("sweep", 2, "sweep-2", "z-a", "v4-32", at(9.5))
        await tx.transition(c.id, P.REQUESTED, P.READY, at(9), cloud=facts(since=at(9)))
        run = await tx.start_attempt(c.id, at(8.9))
        await tx.finish_attempt(run.id, AttemptOutcome.PREEMPTED, at(3))
        await tx.transition(
            c.id,
            P.READY,
            P.DEAD,
            at(3),
            end_reason="preempted",
            slot_update=slot_update("sweep", 2, add_preemptions=1),
            cause=LossCause.PREEMPTED,
        )

        # sweep/3: READY 9h, attempt 1 failed, attempt 2 succeeded, slot done, node deleted.
        d = await tx.request_node("sweep", 3, "sweep-3", "z-a", "v4-32", at(9.2))
        await tx.transition(d.id, P.REQUESTED, P.CREATING, at(9.2), reason="create accepted")
        await tx.transition(d.id, P.CREATING, P.READY, at(9), cloud=facts(since=at(9)))
        run = await tx.start_attempt(d.id, at(8.9))
        await tx.finish_attempt(
            run.id,
            AttemptOutcome.FAILED,
            at(8.5),
            exit_codes={0: 1, 1: 0},
            detail="worker 0 exited 1",
        )
        run = await tx.start_attempt(d.id, at(8.4))
        await tx.finish_attempt(run.id, AttemptOutcome.SUCCEEDED, at(6.4), exit_codes={0: 0, 1: 0})
        await tx.update_slot("sweep", 3, at(6.4), done=True)
        await tx.begin_delete(
            d.id, P.READY, at(6.3), end_reason="done", reason="sweep-3: workload done, deleting"
        )
        await tx.transition(d.id, P.DELETING, P.DELETED, at(6.2))

        # eval/0: one quota failure 1.5h ago, no node.
        e = await tx.request_node("eval", 0, "eval-0", "z-a", "v4-8", at(1.5))
        await tx.record_create_attempt(
            CreateAttemptRecord(
                "eval", 0, "z-a", "v4-8", at(1.5), "quota", 0.3, "quota exceeded", e.id
            )
        )
        await tx.transition(e.id, P.REQUESTED, P.FAILED, at(1.5))

        # z-c cannot be listed for 4 ticks; z-a lists fine.
        await tx.save_zone_health(ZoneHealth("proj", "z-a", last_ok_at=at(0)), at(0))
        await tx.save_zone_health(
            ZoneHealth(
                "proj",
                "z-c",
                failures=4,
                error_kind=ErrorKind.TRANSIENT,
                error_message="cannot reach http://127.0.0.1:9/: connection refused",
                failing_since=at(0.1),
                unreachable=True,
            ),
            at(0),
        )


def approx(value: float) -> Any:
    return pytest.approx(value, abs=0.02)


def check_running_now(rows: Rows) -> None:
    got = [(r["fleet"], r["slot"], r["node"], r["zone"], r["phase"], r["attempt"]) for r in rows]
    assert got == [
        ("sweep", 0, "sweep-0", "z-a", "ready", 2),
        ("sweep", 1, "sweep-1", "z-b", "ready", None),
        ("sweep", 2, "sweep-2", "z-a", "dead", None),
    ]
    assert rows[0]["cloud_state"] == "READY"
    assert rows[0]["preemptions"] == 1


def check_recent_events(rows: Rows) -> None:
    assert len(rows) == 20
    assert rows[0]["id"] > rows[-1]["id"]  # newest first
    assert rows[0]["kind"] == "node.failed"
    assert rows[0]["node"] == "eval-0"


def check_zones_failing(rows: Rows) -> None:
    keys = ("project", "zone", "failures", "error_kind", "unreachable")
    got = [tuple(r[k] for k in keys) for r in rows]
    assert got == [("proj", "z-c", 4, "transient", 1)]
    assert "connection refused" in rows[0]["error_message"]


def check_preemptions_per_fleet(rows: Rows) -> None:
    assert [(r["fleet"], r["preemptions"], r["slots_hit"]) for r in rows] == [
        ("eval", 0, 0),
        ("sweep", 2, 2),
    ]
    assert rows[1]["first_at"] < rows[1]["last_at"]


def check_losses_by_cause(rows: Rows) -> None:
    # Two preemptions recorded with their cause; sweep/3's failed attempt is the one crash;
    # sweep-3's delete when its workload was done is no loss (no cause).
    assert [(r["fleet"], r["cause"], r["losses"]) for r in rows] == [
        ("sweep", "preempted", 2),
        ("sweep", "crash", 1),
    ]


def check_preemption_history(rows: Rows) -> None:
    assert [(r["node_name"], r["zone"]) for r in rows] == [("sweep-2", "z-a"), ("sweep-0", "z-a")]
    assert [r["ready_hours"] for r in rows] == [6.0, 4.0]


def check_goodput(rows: Rows) -> None:
    got = {r["slot"]: r for r in rows if r["fleet"] == "sweep"}
    expected = {  # slot: (incarnations, attempts, preemptions, failures, ready_h, running_h)
        0: (2, 2, 1, 0, 4.0 + 5.0, 3.9 + 4.9),
        1: (4, 0, 0, 0, 1.0, 0.0),
        2: (1, 1, 1, 0, 6.0, 5.9),
        3: (1, 2, 0, 1, 2.7, 0.4 + 2.0),
    }
    for slot, (incs, attempts, preempted, failures, ready_h, running_h) in expected.items():
        r = got[slot]
        assert (r["incarnations"], r["attempts"], r["preemptions"], r["failures"]) == (
            incs,
            attempts,
            preempted,
            failures,
        ), slot
        assert (r["wall_h"], r["ready_h"], r["running_h"]) == (
            approx(10),
            approx(ready_h),
            approx(running_h),
        ), slot
        assert r["uptime_pct"] == pytest.approx(100 * ready_h / 10, abs=0.2), slot
        assert r["goodput_pct"] == pytest.approx(100 * running_h / 10, abs=0.2), slot
    (evaluation,) = [r for r in rows if r["fleet"] == "eval"]
    assert (evaluation["wall_h"], evaluation["ready_h"], evaluation["goodput_pct"]) == (
        approx(2),
        0.0,
        0.0,
    )


def check_recent_create_failures(rows: Rows) -> None:
    assert [(r["zone"], r["accelerator_type"], r["outcome"], r["failures"]) for r in rows] == [
        ("z-a", "v4-32", "capacity", 3),
        ("z-a", "v4-8", "quota", 1),
    ]


def check_create_failures_all_time(rows: Rows) -> None:
    assert [(r["outcome"], r["failures"], r["last_message"]) for r in rows] == [
        ("capacity", 3, "no more capacity (2h ago)"),
        ("quota", 1, "quota exceeded"),
    ]


def check_attempts_of_slot(rows: Rows) -> None:
    assert [
        (r["number"], r["outcome"], json.loads(r["exit_codes"]), r["detail"]) for r in rows
    ] == [
        (1, "failed", {"0": 1, "1": 0}, "worker 0 exited 1"),
        (2, "succeeded", {"0": 0, "1": 0}, None),
    ]


def check_node_life(rows: Rows) -> None:
    assert [(r["from_phase"], r["to_phase"]) for r in rows] == [
        (None, "requested"),
        ("requested", "creating"),
        ("creating", "ready"),
        ("ready", "deleting"),
        ("deleting", "deleted"),
    ]
    assert rows[1]["message"] == "create accepted"
    assert rows[3]["message"] == "sweep-3: workload done, deleting"


async def keep_days(store: Store, now: datetime) -> None:
    """Two closed days of sweep/0's ledger, as the daemon's maintenance task writes them."""
    day = (now - hours(72)).date()
    days = {
        (day, Category.PRODUCTIVE, None, None): [3 * 3600 * 10**6, 0],
        (day + timedelta(days=1), Category.PRODUCTIVE, None, None): [3600 * 10**6, 0],
        (day + timedelta(days=1), Category.RECOVERY, Phase.PROVISIONING, LossCause.PREEMPTED): [
            600 * 10**6,
            0,
        ],
        (day + timedelta(days=1), Category.WASTED, None, LossCause.PREEMPTED): [
            3000 * 10**6,
            120,
        ],
    }
    until = datetime.combine(day + timedelta(days=2), time(), UTC)
    async with store.write() as tx:
        assert await tx.keep_ledger_days("sweep", 0, None, until, days)


def check_slot_ledger(rows: Rows) -> None:
    got = {(r["slot"], r["category"]): r for r in rows}
    assert [(r["slot"], r["category"]) for r in rows] == [
        (0, "productive"),
        (0, "WASTED_PROGRESS_FROM_DISRUPTION"),
        (0, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"),
    ]
    productive = got[(0, "productive")]
    assert (productive["days"], productive["seconds"], productive["share_pct"]) == (2, 14400, 80)
    assert productive["first_day"] < productive["last_day"]
    wasted = got[(0, "WASTED_PROGRESS_FROM_DISRUPTION")]
    assert (wasted["days"], wasted["seconds"], wasted["steps_lost"]) == (1, 3000, 120)


EXPECTED: dict[str, list[Callable[[Rows], None]]] = {
    "What is running now": [check_running_now],
    "Recent events": [check_recent_events],
    "Zones the daemon cannot list": [check_zones_failing],
    "Preemptions per fleet": [check_preemptions_per_fleet],
    "Losses by cause": [check_losses_by_cause],
    "Preemption history": [check_preemption_history],
    "Uptime and goodput per slot": [check_goodput],
    "Where the time went, closed days": [check_slot_ledger],
    "Create failures by zone in the last day": [
        check_recent_create_failures,
        check_create_failures_all_time,
    ],
    "Workload attempts of one slot": [check_attempts_of_slot],
    "The life of one node": [check_node_life],
}


def sqlite3_json(db: Path, sql: str) -> Rows:
    done = subprocess.run(
        ["sqlite3", "-readonly", "-json", str(db)],
        input=sql,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (0, "")
    return json.loads(done.stdout) if done.stdout.strip() else []


async def test_every_documented_query_answers_its_question(store: Store, migrated: Path):
    await populate(store, datetime.now(UTC))
    await keep_days(store, datetime.now(UTC))
    blocks = sql_blocks()
    assert {h: len(b) for h, b in blocks.items()} == {h: len(c) for h, c in EXPECTED.items()}
    for heading, queries in blocks.items():
        for sql, check in zip(queries, EXPECTED[heading], strict=True):
            rows = sqlite3_json(migrated, sql)
            try:
                check(rows)
            except AssertionError as exc:
                raise AssertionError(f"{heading!r}: {sql}\n-> {rows}") from exc


def test_the_tables_section_names_every_table():
    from tpucared.store.models import metadata

    text = DOC.read_text()
    for table in metadata.sorted_tables:
        assert f"| `{table.name}` |" in text, table.name
