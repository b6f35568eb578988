"""The database going away is weather, not a crash: real daemons on a real PostgreSQL whose
server is stopped (`pg_ctl stop -m immediate`: every connection drops at once) while a node is
preempted, then started again.

Neither daemon dies (no root task ends on a connection error); while the server is away no
daemon acts on the cloud (it cannot record intent or check its lease); the leader says once,
in its log and on /healthz, that it stands by for the database; once the server is back one
daemon leads again within the lease and replaces the node, and nothing is leaked or doubled.
The same for SQLite on a disk that fills up (a small tmpfs, filled with `dd`): one clear line
("the disk is full"), no call the daemon could not record, and business as usual once there
is room again. Mounting needs root, which the tests have (CI runs them as root): without it
the test fails, it does not skip.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from leader_support import (
    LEASE_S,
    POLL_S,
    SLACK_S,
    Pair,
    http,
    leader_then_standby,
    mutations,
    ready,
    replaced,
)
from postgres_support import PostgresServer
from runtime_support import SLOW, Control, Daemon, converged, ours, wait_for, write_config

pytestmark = pytest.mark.slow

OUTAGE_S = 8.0  # longer than the lease (3 s): a leader's term has surely ended meanwhile


async def outage_with_a_preemption(
    control: Control, pair: Pair, postgres: PostgresServer, during: Callable[[], object]
) -> float:
    """Stop the server, preempt sweep-1, wait OUTAGE_S (calling `during` halfway), start the
    server again; the time it is back. No create or delete reaches the cloud meanwhile."""
    halted_at = time.time()
    await asyncio.to_thread(postgres.halt)
    try:
        await control.node_action("sweep-1", "preempt")
        await asyncio.sleep(OUTAGE_S / 2)
        result = during()
        if asyncio.iscoroutine(result):
            await result
        await asyncio.sleep(OUTAGE_S / 2)
        assert mutations(await control.requests(since=halted_at)) == []
    finally:
        await asyncio.to_thread(postgres.resume)
    return time.time()


async def test_one_daemon_stands_by_while_the_database_is_away_and_leads_again(
    control: Control, pair: Pair, postgres: PostgresServer, daemons: Callable[[Path], Daemon]
) -> None:
    a = await daemons(pair.configs[0]).start()
    first = await wait_for(lambda: ready(control, pair), SLOW, "3 nodes READY")
    assert first is not None

    async def says_so() -> None:
        code, text = await http(pair.ports[0], "/healthz")
        assert (code, "database unavailable" in text) == (503, True), text

    back_at = await outage_with_a_preemption(control, pair, postgres, says_so)
    assert a.process.returncode is None, "the daemon died with the database"
    await wait_for(lambda: replaced(control, pair, first[1][1]), SLOW, "sweep-1 replaced")
    creates = [r for r in await control.requests(since=back_at) if r["method"] == "POST"]
    assert creates
    assert float(creates[0]["time"]) - back_at < LEASE_S + POLL_S + SLACK_S
    assert len(ours(await control.nodes())) == 3
    assert await pair.leader_pid() == a.pid
    assert await http(pair.ports[0], "/healthz") == (200, "ok\n")
    a.signal(signal.SIGTERM)
    assert await a.wait(30) == 0
    kinds = [e.get("event") for e in a.log_events()]
    assert kinds.count("database.unavailable") == 1, kinds
    assert kinds.count("lease.attempt_failed") == 1  # once per outage, not once per attempt
    assert "lease.attempt_answered" in kinds
    assert {"task.died", "daemon.failed"}.isdisjoint(kinds)


async def test_leader_and_standby_survive_the_database_going_away(
    control: Control, pair: Pair, postgres: PostgresServer, daemons: Callable[[Path], Daemon]
) -> None:
    a, b, first = await leader_then_standby(control, pair, daemons)
    await outage_with_a_preemption(control, pair, postgres, lambda: None)
    assert [d.process.returncode for d in (a, b) if d.process] == [None, None]
    await wait_for(lambda: replaced(control, pair, first[1][1]), SLOW, "sweep-1 replaced")
    await wait_for(pair.leader_pid, SLOW, "a leader")
    assert await pair.leader_pid() in (a.pid, b.pid)
    assert len(ours(await control.nodes())) == 3
    live = await pair.live()
    assert sorted(r[0] for r in live) == ["0", "1", "2"], live  # one live node per slot
    for daemon in (a, b):
        daemon.signal(signal.SIGTERM)
    assert [await a.wait(30), await b.wait(30)] == [0, 0]
    for daemon in (a, b):
        kinds = [e.get("event") for e in daemon.log_events()]
        assert {"task.died", "daemon.failed"}.isdisjoint(kinds), daemon.log_path


async def test_a_stop_while_the_database_is_away_is_prompt(
    control: Control, pair: Pair, postgres: PostgresServer, daemons: Callable[[Path], Daemon]
) -> None:
    a = await daemons(pair.configs[0]).start()
    await wait_for(lambda: ready(control, pair), SLOW, "3 nodes READY")
    await asyncio.to_thread(postgres.halt)
    try:
        await control.node_action("sweep-1", "preempt")
        await asyncio.sleep(2 * POLL_S)  # a tick or two meet the database gone
        stopped_at = time.monotonic()
        a.signal(signal.SIGTERM)
        code = await a.wait(30)
        took = time.monotonic() - stopped_at
    finally:
        await asyncio.to_thread(postgres.resume)
    print(f"stopped {took:.2f} s after SIGTERM, the database away")
    assert code == 0
    assert took < 2.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MB tmpfs of its own (unmounted at the end)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


async def test_a_full_disk_under_sqlite_is_weather_too(
    tmp_path: Path, small_disk: Path, control: Control, daemons: Callable[[Path], Daemon]
) -> None:
    disk = small_disk
    db = disk / "state.db"
    config = write_config(tmp_path, control.emulator.url, size=2, poll="500ms")
    config.write_text(
        config.read_text(encoding="utf-8").replace('db = "state.db"', f'db = "{db}"'),
        encoding="utf-8",
    )
    a = await daemons(config).start()
    await wait_for(lambda: converged(control, db, 2), SLOW, "2 nodes READY")
    filler = disk / "filler"
    fill = ["dd", "if=/dev/zero", f"of={filler}", "bs=64k"]  # until the disk is full
    await asyncio.to_thread(subprocess.run, fill, capture_output=True, check=False)
    full_at = time.time()
    await control.node_action("sweep-1", "preempt")

    async def stood_by() -> bool:
        return any(e.get("event") == "database.unavailable" for e in a.log_events())

    await wait_for(stood_by, SLOW, "the daemon standing by for the full disk")
    await asyncio.sleep(2.0)  # ticks and lease attempts, had it gone on
    requests = await control.requests(since=full_at)
    assert [r for r in requests if r["method"] in ("POST", "DELETE")] == []
    assert a.process is not None
    assert a.process.returncode is None
    os.remove(filler)
    await wait_for(lambda: converged(control, db, 2), SLOW, "replaced once there is room")
    assert len(ours(await control.nodes())) == 2
    a.signal(signal.SIGTERM)
    assert await a.wait(30) == 0
    gone = [e for e in a.log_events() if e.get("event") == "database.unavailable"]
    assert len(gone) == 1
    assert "the disk is full" in gone[0]["error"]
    assert {"task.died", "daemon.failed"}.isdisjoint(e.get("event") for e in a.log_events())
