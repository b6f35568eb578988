"""Real processes on one database file: a daemon-like writer with readers and another writer
(no "database is locked"), and `kill -9` at random moments (nothing lost, duplicated or
half-written)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from store_support import check_invariants, open_raw

WORKER = Path(__file__).parent / "store_worker.py"


Spawn = Callable[..., Awaitable[asyncio.subprocess.Process]]


@pytest.fixture
async def spawn() -> AsyncIterator[Spawn]:
    """Starts store_worker.py processes; any still running when the test ends is killed."""
    started: list[asyncio.subprocess.Process] = []

    async def start(*args: str) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()


async def sqlite3_cli_reader(db: Path, seconds: float) -> int:
    """A person running docs queries with the sqlite3 shell meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    runs = 0
    while loop.time() < deadline:
        proc = await asyncio.create_subprocess_exec(
            "sqlite3",
            "-readonly",
            "-json",
            str(db),
            "SELECT * FROM v_running_now; SELECT count(*) AS n FROM events;",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert b"locked" not in err
        runs += 1
    return runs


async def test_writers_and_readers_in_other_processes_do_not_lock_each_other(
    migrated: Path, spawn: Spawn
):
    seconds = "3"
    daemon = await spawn("daemon", str(migrated), seconds)
    assert daemon.stdout is not None
    assert await daemon.stdout.readline() == b"ready\n"  # fleets seeded
    others = [
        await spawn("reader", str(migrated), seconds),
        await spawn("toggler", str(migrated), seconds),
    ]
    cli_runs = await sqlite3_cli_reader(migrated, float(seconds) - 1)
    outputs = {}
    for name, proc in zip(("daemon", "reader", "toggler"), [daemon, *others], strict=True):
        out, err = await proc.communicate()
        assert proc.returncode == 0, f"{name}: {err.decode()}"
        assert b"locked" not in err
        outputs[name] = out.decode().split()
    wrote = int(outputs["daemon"][outputs["daemon"].index("wrote") + 1])
    reads = int(outputs["reader"][1])
    flips = int(outputs["toggler"][1])
    assert min(wrote, reads, flips, cli_runs) > 3, (wrote, reads, flips, cli_runs)
    check_invariants(migrated)


async def test_kill_9_at_random_moments_loses_and_duplicates_nothing(migrated: Path, spawn: Spawn):
    """Each round a writer runs random transactions and is SIGKILLed at a random moment; the
    next round continues on the same file, as a restarted daemon would. After every kill the
    file is intact, every invariant holds, and every acknowledged commit is there once."""
    rng = random.Random(20250601)
    totals = []
    for round_no in range(5):
        run = f"r{round_no}"
        proc = await spawn("crash", str(migrated), str(rng.randrange(2**31)), run)
        assert proc.stdout is not None
        acked: list[int] = []
        # Let it get going (a slow machine must not turn this into a test of start-up), then
        # kill it at a random moment.
        while len(acked) < 5:
            line = (await proc.stdout.readline()).decode()
            assert line, f"worker died: {(await proc.communicate())[1].decode()}"
            if line.startswith("commit"):
                acked.append(int(line.split()[1]))
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        proc.send_signal(signal.SIGKILL)
        out, _ = await proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        acked += [int(x.split()[1]) for x in out.decode().splitlines() if x.startswith("commit")]

        counts = check_invariants(migrated)
        conn = open_raw(migrated)
        seqs = sorted(
            json.loads(r[0])["seq"]
            for r in conn.execute(
                "SELECT details FROM events WHERE kind = 'test.commit' AND message = ?", (run,)
            )
        )
        conn.close()
        # In order, each once, and at most one more than acknowledged (committed, then killed
        # before it could say so).
        assert seqs == list(range(1, len(seqs) + 1)), seqs
        assert acked[-1] <= len(seqs) <= acked[-1] + 1, (acked[-1], len(seqs))
        totals.append(counts)
    assert totals[-1]["events"] > totals[0]["events"] > 0
    assert totals[-1]["nodes"] > 0
    assert totals[-1]["batches"] > 0


def test_sqlite3_cli_is_installed():
    """The docs and the tests above need the sqlite3 shell (Debian package `sqlite3`)."""
    done = subprocess.run(["sqlite3", "-version"], capture_output=True, text=True, check=True)
    major, minor = (int(x) for x in done.stdout.split()[0].split(".")[:2])
    assert (major, minor) >= (3, 33), "need sqlite3 >= 3.33 for -json and -box"
