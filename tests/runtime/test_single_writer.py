"""One daemon per database: real `tpucared run` processes against the emulator.

A second daemon started on the same file (while the first has creates in flight) says who holds
it, in one line, and exits 2 having touched nothing: the calls in flight are not recorded as
interrupted, no event is written, it never listens on the HTTP port, and the creates finish
once, without duplicate POSTs. Two daemons started at once on a fresh file: one runs, the other
refuses (no `database is locked` crash). The lock dies with its process, `kill -9` included.
The readers (`status`, `events`, `plan`) and `up` work beside a running daemon and take no lock;
`up` (like `down`) never migrates a database beneath a daemon that holds it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import (
    REPO,
    SLOW,
    Control,
    Daemon,
    cli_env,
    converged,
    live_nodes,
    query,
    wait_for,
    write_config,
)

from tpucared.store.lock import WriterLock
from tpucared.store.migrate import downgrade_to, head_revision

pytestmark = pytest.mark.slow

Daemons = Callable[[Path], Daemon]

# Each create call takes this long to answer: the first daemon's creates stay in flight
# (phase "requested") while the second starts and stops. Below the client's 30 s read timeout.
CREATE_LATENCY_MS = 20_000

# A second daemon says who holds the database within a few seconds (about 1 s, most of it
# Python's start-up and imports; the margin is for a loaded CI machine).
REFUSED_WITHIN = 10.0


async def tpucared(*args: str) -> tuple[int, str, str, float]:
    """`python -m tpucared ARGS`: exit status, stdout, stderr, and seconds it took."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tpucared",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=cli_env(),
        cwd=REPO,
    )
    out, err = await asyncio.wait_for(proc.communicate(), SLOW)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode(), time.monotonic() - started


# The running daemon's own heartbeat: it renews its lease every few seconds whatever a second
# daemon does, so a dump taken across a renewal differs there (CI on 5f25b24 caught one).
HEARTBEAT = {"leader_lease": {"renewed_at", "expires_at"}}


def dump(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table (read-only, beside the running daemon), but the heartbeat."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        rows = {}
        for t in tables:
            columns = [c[1] for c in conn.execute(f'PRAGMA table_info("{t}")')]
            kept = ", ".join(f'"{c}"' for c in columns if c not in HEARTBEAT.get(t, set()))
            rows[t] = conn.execute(f'SELECT {kept} FROM "{t}" ORDER BY rowid').fetchall()
        return rows
    finally:
        conn.close()


def log_events(stdout: str) -> list[str]:
    events = []
    for line in stdout.splitlines():
        try:
            events.append(json.loads(line)["event"])
        except (ValueError, KeyError, TypeError):
            continue
    return events


async def _in_flight(db: Path, n: int) -> bool:
    live = live_nodes(db)
    return len(live) == n and all(r["phase"] == "requested" for r in live.values())


async def test_a_second_daemon_refuses_in_one_line_and_changes_nothing(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    db = tmp_path / "state.db"
    config = write_config(tmp_path, control.emulator.url, size=2)
    await control.faults(
        {"latency_ms": CREATE_LATENCY_MS, "paths": ["/nodes"], "methods": ["POST"]}
    )
    first = await daemons(config).start()
    await wait_for(lambda: _in_flight(db, 2), SLOW, "two creates in flight")
    holder = json.loads((tmp_path / "state.db.lock").read_text())
    assert holder["pid"] == first.pid

    before = dump(db)
    code, out, err, took = await tpucared("run", "-c", str(config))
    after = dump(db)

    assert code == 2, err
    assert err.splitlines() == [f"tpucared: another tpucared (pid {first.pid}) holds {db}"]
    assert "database.ready" not in log_events(out)  # stopped before migrating or opening
    assert after == before  # no interrupted calls recorded, no event, nothing
    assert all(r["error"] is None for r in live_nodes(db).values())
    assert first.process is not None
    assert first.process.returncode is None
    assert took < REFUSED_WITHIN

    # The creates in flight finish once each: no duplicate POST.
    await wait_for(lambda: converged(control, db, 2), SLOW + CREATE_LATENCY_MS / 1000, "READY")
    posts = [r for r in await control.requests() if r["method"] == "POST"]
    assert len([r for r in posts if re.search(r"/nodes($|\?)", r["path"])]) == 2, posts
    events = [r["kind"] for r in query(db, "SELECT kind FROM events")]
    assert not any("interrupt" in kind for kind in events), events
    assert first.process.returncode is None


async def test_the_lock_dies_with_its_process(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    db = tmp_path / "state.db"
    config = write_config(tmp_path, control.emulator.url, size=1)
    first = await daemons(config).start()
    await wait_for(lambda: converged(control, db, 1), SLOW, "the first daemon running")
    await first.kill()  # kill -9: no clean-up of any kind
    assert (tmp_path / "state.db.lock").exists()  # left behind, and no obstacle

    second = await daemons(config).start()

    async def serving() -> bool:
        return "database.ready" in [e.get("event") for e in second.log_events()]

    await wait_for(serving, SLOW, "the second daemon past its lock")
    assert second.process is not None
    assert second.process.returncode is None
    second.signal(signal.SIGTERM)
    assert await second.wait(30) == 0
    assert (tmp_path / "state.db.lock").read_text() == ""  # released: no stale pid in it


async def test_readers_and_up_work_beside_the_daemon_and_take_no_lock(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    db = tmp_path / "state.db"
    config = write_config(tmp_path, control.emulator.url, size=1)
    first = await daemons(config).start()
    await wait_for(lambda: converged(control, db, 1), SLOW, "the daemon running the fleet")

    for command, says in (
        ("status", "sweep"),
        ("events", "sweep-0"),
        ("plan", "nothing to do"),
        ("up", "up: fleet sweep was not down"),
    ):
        code, out, err, _ = await tpucared(command, "-c", str(config))
        assert code == 0, (command, err)
        assert says in out, (command, out)
        assert "holds" not in err
    assert json.loads((tmp_path / "state.db.lock").read_text())["pid"] == first.pid
    assert first.process is not None
    assert first.process.returncode is None


async def test_up_never_migrates_beneath_a_daemon_that_holds_the_database(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    """A database at an older schema, held by another process (an older tpucared's daemon, as
    far as the lock can tell): `up` refuses in one line and leaves the schema alone; once the
    holder is gone, `up` migrates it (taking the lock while it does)."""
    db = tmp_path / "state.db"
    config = write_config(tmp_path, control.emulator.url, size=1)
    daemon = await daemons(config).start()
    await wait_for(lambda: converged(control, db, 1), SLOW, "the fleet recorded")
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(30) == 0
    head = head_revision()
    older = await downgrade_to(db, f"{int(head) - 1:04d}")

    def revision() -> str:
        return str(query(db, "SELECT version_num FROM alembic_version")[0]["version_num"])

    with WriterLock(db):  # this test's process holds it: a daemon as far as `up` can tell
        code, out, err, took = await tpucared("up", "-c", str(config))
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        f"tpucared: another tpucared (pid {os.getpid()}) holds {db}, and its schema is not "
        f"this tpucared's (head {head}): a migration is never made beneath a running daemon; "
        "use the daemon's tpucared version, or stop the daemon first"
    ]
    assert revision() == older
    assert took < REFUSED_WITHIN

    code, out, err, _ = await tpucared("up", "-c", str(config))
    assert code == 0, err
    assert out.strip() == "up: fleet sweep was not down"
    assert revision() == head
    assert (tmp_path / "state.db.lock").read_text() == ""  # taken for the migration, released


async def test_a_term_during_start_up_is_a_clean_stop(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    """systemd may stop a unit that is still starting: the TERM that arrives any time after the
    first log line (here: while the lock is taken and the database migrated) exits 0 and
    releases the lock, like a TERM in a tick."""
    config = write_config(tmp_path, control.emulator.url, size=1)
    daemon = await daemons(config).start()

    async def starting() -> bool:
        return "daemon.starting" in [e.get("event") for e in daemon.log_events()]

    await wait_for(starting, SLOW, "the daemon's first line")
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(30) == 0
    assert "daemon.stopped" in [e.get("event") for e in daemon.log_events()]
    lock = tmp_path / "state.db.lock"
    assert not lock.exists() or lock.read_text() == ""


async def test_two_daemons_started_together_on_a_fresh_file(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    db = tmp_path / "state.db"
    config = write_config(tmp_path, control.emulator.url, size=1)
    pair = [daemons(config), daemons(config)]
    await asyncio.gather(*(d.start() for d in pair))

    async def one_exited() -> bool:
        return any(d.process is not None and d.process.returncode is not None for d in pair)

    await wait_for(one_exited, SLOW, "one of the two to refuse")
    loser = next(d for d in pair if d.process is not None and d.process.returncode is not None)
    winner = next(d for d in pair if d is not loser)
    assert await loser.wait(1) == 2
    lines = [
        line
        for line in loser.log_path.read_text().splitlines()
        if not line.startswith("{")  # its JSON log lines ("daemon.starting")
    ]
    assert lines == [f"tpucared: another tpucared (pid {winner.pid}) holds {db}"]
    await wait_for(lambda: converged(control, db, 1), SLOW, "the winner running the fleet")
    assert winner.process is not None
    assert winner.process.returncode is None
