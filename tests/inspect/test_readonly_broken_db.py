"""Every command that only reads the database (`status`, `events`, `logs`, `exec`, `cp`) on one
it must not read: one line on stderr, exit 2, no traceback, and the database file's bytes as
they were (a missing one is not created). Besides the files refused before reading
(tests/inspect/test_inspect_broken_db.py), a corrupt page that only a read of its table meets: the
check skips `quick_check` to stay quick, so the read itself must say it in one line.

`logs`, `exec` and `cp` take the config (for the SSH key); they stop at the database, before
any SSH, so the config's endpoint and workers are never reached.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from test_inspect_broken_db import _at_revision, _foreign, _garbage, _ours, _truncated
from test_inspect_broken_db import _cli as broken_cli

from bench import daemon_config

REPO = Path(__file__).resolve().parents[2]


def _corrupt_events_page(path: Path) -> None:
    """Ours at head with 200 events; the last page (the events table's) is garbage: the
    schema and alembic_version read fine, a read of the events does not."""
    _ours(path)
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO events (at, kind, message, details) VALUES (?, 'test', ?, '{}')",
            [("2026-01-01 00:00:00.000000", f"event {n} " + "x" * 200) for n in range(200)],
        )
    db.close()
    data = path.read_bytes()
    path.write_bytes(data[:-4096] + bytes(range(256)) * 16)


CASES = [
    ("garbage", _garbage, "not an SQLite database"),
    ("truncated", _truncated, "the database is corrupt"),
    ("foreign", _foreign, "not a tpucared database"),
    ("newer", _at_revision("9999"), "schema revision 9999 is newer than this tpucared"),
    ("corrupt events page", _corrupt_events_page, "the database is corrupt"),
]

COMMANDS = [
    ["status"],
    ["events"],
    ["events", "--since", "0"],
    ["logs", "sweep/0"],
    ["exec", "sweep/0", "--", "true"],
    ["cp", "README.md", "sweep/0:/tmp/x"],
]


def _config(directory: Path, db: Path) -> Path:
    config = daemon_config.against_emulator(
        "http://127.0.0.1:9",
        daemon_config.fleet(capacity="spot"),
        daemon={"db": str(db), "poll_interval": None, "http": None},
    )
    return daemon_config.write(directory / "fleet.toml", config)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return broken_cli(*args, env={"PATH": "/usr/bin:/bin"})


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_database_they_must_not_read_is_one_line_and_unchanged(
    tmp_path: Path, command: list[str], make: Callable[[Path], None], expected: str
) -> None:
    db = tmp_path / "state" / "state.db"
    db.parent.mkdir()
    make(db)
    config = _config(tmp_path, db)
    before = _digest(db)

    done = _cli(command[0], "-c", str(config), *command[1:])

    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [done.stderr.splitlines()[0]], done.stderr
    assert done.stderr.startswith(f"tpucared: {db}: {expected}"), done.stderr
    assert _digest(db) == before
    assert not (tmp_path / "id_ed25519").exists()  # stopped before anything else


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_a_missing_database_is_one_line_and_not_created(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "nested" / "state.db"
    done = _cli(command[0], "-c", str(_config(tmp_path, db)), *command[1:])
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"tpucared: no database at {db}: the daemon creates it on its first start "
        "(or pass --db, -c FILE, or set TPUCARED_DB)"
    ]
    assert not (tmp_path / "nested").exists()
