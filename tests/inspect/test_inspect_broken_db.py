"""`status` and `events` on a database they must not read: one line on stderr, exit 2, no
traceback, and the file exactly as it was (nothing created, migrated or written)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tpucared.store.migrate import head_revision, upgrade

REPO = Path(__file__).resolve().parents[2]


def _ours(path: Path) -> None:
    upgrade(path)


def _garbage(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 20)


def _truncated(path: Path) -> None:
    _ours(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")


def _at_revision(revision: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        _ours(path)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE alembic_version SET version_num = ?", (revision,))

    return make


def _no_schema(path: Path) -> None:
    sqlite3.connect(path).close()  # an empty SQLite file: zero bytes


CASES = [
    ("garbage", _garbage, "not an SQLite database"),
    ("truncated", _truncated, "the database is corrupt"),
    ("foreign", _foreign, "not a tpucared database (no alembic_version; it holds invoices)"),
    ("newer", _at_revision("9999"), "schema revision 9999 is newer than this tpucared"),
    ("older", _at_revision("0001"), "schema revision 0001 is older than this tpucared's"),
    ("stranger", _at_revision("abc"), "schema revision 'abc' is not one of tpucared's"),
]


def _data(folder: Path) -> dict[str, bytes]:
    """The files that hold data. A reader of a WAL database may create an empty `-wal` and
    create or touch `-shm`, SQLite's shared-memory index of the WAL: neither holds data."""
    files = {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.endswith("-shm")}
    return {name: data for name, data in files.items() if data or not name.endswith("-wal")}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tpucared ARGS` from the repository, in `env` (None: this process's)."""
    return subprocess.run(
        [sys.executable, "-m", "tpucared", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
        env=env,
    )


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["events"]])
@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_database_they_must_not_read_is_one_line(
    tmp_path: Path, command: list[str], make: Callable[[Path], None], expected: str
) -> None:
    db = tmp_path / "state.db"
    make(db)
    before = _data(tmp_path)

    done = _cli(*command, "--db", str(db))

    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # no traceback
    assert lines[0].startswith(f"tpucared: {db}: {expected}"), lines
    assert _data(tmp_path) == before


def test_a_file_without_a_schema_says_so_and_stays_empty(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    _no_schema(db)
    done = _cli("status", "--db", str(db))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"tpucared: {db}: no tpucared schema yet: the daemon creates it on its first start "
        "(or run `tpucared db upgrade`)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]
    assert db.stat().st_size == 0


def test_a_missing_database_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "nested" / "state.db"
    done = _cli("events", "--db", str(db))
    assert done.returncode == 2
    assert done.stderr.startswith(f"tpucared: no database at {db}")
    assert not (tmp_path / "nested").exists()


def test_a_sound_database_at_head_is_read(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    _ours(db)
    done = _cli("status", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "no fleets" in done.stdout
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (head_revision(),)
        ]
