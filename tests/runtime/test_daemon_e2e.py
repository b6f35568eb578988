"""The real daemon process (`python -m tpucared run`) against the emulator over loopback, with a
real SQLite file: a fleet comes up, dead nodes of every kind are replaced, stockouts are
hunted without hot-looping, errors a person must fix are not retried in a loop, and SIGTERM
stops it cleanly without touching a node."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from runtime_support import (
    OWNER,
    SLOW,
    Control,
    Daemon,
    converged,
    free_port,
    live_nodes,
    ours,
    query,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.slow

Daemons = Callable[[Path], Daemon]


def _parse(ts: str) -> datetime:
    """A time from the database: naive UTC in columns, ISO with offset in event details."""
    value = datetime.fromisoformat(ts)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


async def test_a_fleet_comes_up_dead_nodes_are_replaced_and_sigterm_leaves_it_running(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    db = tmp_path / "state.db"
    port = free_port()
    daemon = await daemons(write_config(tmp_path, control.emulator.url, http_port=port)).start()
    await wait_for(lambda: converged(control, db, 3), SLOW, "3 READY v4-8 slices")

    # What every create carried: our labels, the daemon's SSH key, external IPs, spot.
    algorithm, blob = (tmp_path / "id_ed25519.pub").read_text().split()[:2]
    for node in ours(await control.nodes()):
        spec = node["node"]
        assert spec["labels"] == {
            "team": "tests",
            "tpucared-fleet": "sweep",
            "tpucared-owner": OWNER,
        }
        assert spec["metadata"] == {"ssh-keys": f"tpucared:{algorithm} {blob} tpucared"}
        assert spec["networkConfig"]["enableExternalIps"] is True
        assert spec["schedulingConfig"] == {"spot": True}

    before = {slot: row["id"] for slot, row in live_nodes(db).items()}
    await control.node_action("sweep-0", "preempt")
    await control.node_action("sweep-1", "terminate")
    await control.node_action("sweep-2", "vanish")

    async def replaced() -> bool:
        live = live_nodes(db)
        fresh = all(s in live and live[s]["id"] != before[s] for s in range(3))
        return fresh and await converged(control, db, 3)

    await wait_for(replaced, SLOW, "every slot READY again on a new incarnation")

    old = {
        r["slot"]: r
        for r in query(db, "SELECT * FROM nodes WHERE id IN (?, ?, ?)", *before.values())
    }
    assert {s: (r["phase"], r["end_reason"]) for s, r in old.items()} == {
        0: ("deleted", "preempted"),
        1: ("deleted", "terminated"),
        2: ("deleted", "vanished"),
    }
    # Deleted by us (preempted, terminated) or found gone (vanished: no delete call).
    assert [old[s]["delete_calls"] for s in range(3)] == [1, 1, 0]
    assert [r["preemptions"] for r in query(db, "SELECT * FROM slots ORDER BY slot")] == [1, 1, 1]
    assert all(r["phase"] == "ready" for r in live_nodes(db).values())
    # Every create is recorded as an attempt once its fate is known (its operation's end,
    # which may come a moment after the node is listed READY).
    await wait_for(lambda: _attempts(db, 6), SLOW, "six create attempts")
    outcomes = [r["outcome"] for r in query(db, "SELECT outcome FROM create_attempts")]
    assert outcomes == ["ok"] * 6

    # What it shows of itself while it runs (metrics refresh after each tick: poll them).
    base = f"http://127.0.0.1:{port}"
    async with control.session.get(base + "/healthz") as response:
        assert response.status == 200
    expected = [
        'tpucared_nodes{fleet="sweep",phase="ready"} 3.0',
        'tpucared_preemptions_total{fleet="sweep"} 3.0',
        'tpucared_create_attempts_total{fleet="sweep",outcome="ok",zone="us-central2-b"} 6.0',
    ]

    async def metrics_show_it() -> bool:
        async with control.session.get(base + "/metrics") as response:
            text = await response.text()
        return all(line in text for line in expected)

    await wait_for(metrics_show_it, SLOW, f"/metrics to show {expected}")

    # SIGTERM: exit 0 promptly, and the nodes are still there.
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(30) == 0
    assert await converged(control, db, 3)
    events = [e["event"] for e in daemon.log_events()]
    assert "daemon.stopped" in events


async def test_capacity_hunting_retries_on_the_planners_backoff_not_the_poll(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    """With a 10 s poll and a 1-2 s capacity backoff, every retry comes as soon as its backoff
    ends: the loop wakes for it instead of waiting for the next poll. (A loop that only
    planned at its polls would retry 0-10 s late, uniformly: the chance that six retries all
    came within 3 s of their backoff's end would be 0.3^6 < 0.1%.)"""
    db = tmp_path / "state.db"
    await control.capacity(0)
    config = write_config(
        tmp_path,
        control.emulator.url,
        poll="10s",
        policy={"capacity_backoff": "1s", "capacity_backoff_cap": "2s"},
    )
    await daemons(config).start()

    async def attempts() -> list[Any]:
        rows = query(db, "SELECT * FROM create_attempts ORDER BY id")
        return rows if len(rows) >= 9 else []

    rows = await wait_for(attempts, SLOW, "9 create attempts in a stockout")
    assert {r["outcome"] for r in rows} == {"capacity"}
    assert all("no more capacity" in r["message"] for r in rows)

    # Each slot's next attempt waits for the backoff its failure set (a pace from the failed
    # create's post: none left when the failure was seen later than that), and no longer than
    # it takes to notice the hold lifted (far less than the 10 s poll).
    failures = defaultdict(list)
    for e in query(
        db,
        "SELECT slot, at, json_extract(details, '$.slot_update.next_create_at') AS next_at "
        "FROM events WHERE kind = 'node.failed' ORDER BY id",
    ):
        failures[e["slot"]].append(_parse(e["next_at"] or e["at"]))
    by_slot = defaultdict(list)
    for r in rows:
        by_slot[r["slot"]].append(_parse(r["started_at"]))
    waits = []
    for slot, started in by_slot.items():
        for due, previous, nxt in zip(failures[slot], started, started[1:], strict=False):
            lag = (nxt - due).total_seconds()
            assert lag >= 0, f"slot {slot} retried before its backoff ended"
            # At most one create per wait (1 s minus its 10 % jitter) from post to post.
            assert (nxt - previous).total_seconds() >= 0.9, f"slot {slot} outpaced its wait"
            waits.append(lag)
    assert len(waits) >= 6
    assert max(waits) < 3.0, waits

    restored = time.monotonic()
    await control.capacity(None)
    await wait_for(lambda: converged(control, db, 3), SLOW, "the fleet once capacity is back")
    assert time.monotonic() - restored < 8.0  # no poll needed: the operation's end wakes it


async def test_errors_a_person_must_fix_are_not_retried_in_a_loop(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    """Quota and permission refusals of nodes.create: each slot tries once, a person is told,
    and the slot waits out the long error backoff (10 minutes at least)."""
    db = tmp_path / "state.db"
    # The first three creates meet these refusals (in whatever order the slots' calls
    # arrive); any later one would meet a quota error too.
    script = [{"kind": "quota"}, {"kind": "permission"}, {"kind": "quota"}]
    await control.faults(
        {
            "script": script,
            "error_rate": 1.0,
            "kinds": ["quota"],
            "paths": ["/nodes"],
            "methods": ["POST"],
        }
    )
    since = time.time()
    daemon = await daemons(write_config(tmp_path, control.emulator.url)).start()

    async def noticed() -> list[Any]:
        rows = query(db, "SELECT * FROM events WHERE kind = 'notice'")
        return rows if len(rows) == 3 else []

    notices = await wait_for(noticed, SLOW, "a notice per slot for a person")
    await wait_for(lambda: _attempts(db, 3), SLOW, "one recorded attempt per slot")
    await asyncio.sleep(3.0)  # ten polls: time enough for a hot loop to show
    posts = [
        r
        for r in await control.requests(since)
        if r["method"] == "POST" and r["path"].endswith("/nodes")
    ]
    assert len(posts) == 3, posts  # one per slot, no retries
    outcomes = sorted(r["outcome"] for r in query(db, "SELECT outcome FROM create_attempts"))
    assert outcomes == ["permission", "quota", "quota"]
    assert all(json.loads(n["details"])["severity"] == "error" for n in notices)
    assert all("a person must fix this" in n["message"] for n in notices)
    for slot in query(db, "SELECT * FROM slots"):
        wait = _parse(slot["next_create_at"]) - datetime.now(UTC)
        assert wait.total_seconds() > 9 * 60
    assert daemon.process is not None
    assert daemon.process.returncode is None


async def _attempts(db: Path, n: int) -> bool:
    return len(query(db, "SELECT * FROM create_attempts")) >= n
