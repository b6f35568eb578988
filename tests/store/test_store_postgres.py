"""The store on a real PostgreSQL (tests/postgres_support.py): migrations to head and back,
`alembic check` clean, the same Python values back as on SQLite, compare-and-set, adoption in
bulk, events, the change counter's triggers, passwords from the environment and a `.pgpass`
file (never shown), and one-line refusals. The behaviour tests of nodes, reads, workloads
and adopt_many run on both engines in their own modules (conftest.py's `engine_kind`)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from postgres_support import PASSWORD, PASSWORD_USER, PostgresServer
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, StatementError
from store_support import T0, facts, seed

from tpucared.core.model.records import NodePhase
from tpucared.core.vocab.actions import Adopt
from tpucared.store import StaleWrite, Store
from tpucared.store.engine import database_url, make_engine, shown
from tpucared.store.errors import DatabaseError
from tpucared.store.migrate import (
    check_drift,
    check_readable,
    current_revision,
    downgrade_to,
    head_revision,
    upgrade_to_head,
)

P = NodePhase
ROOT = Path(__file__).resolve().parents[2]
T1 = T0 + timedelta(minutes=1)


async def tables(url: URL) -> set[str]:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            )
            return {str(name) for (name,) in rows}
    finally:
        await engine.dispose()


async def scalar(url: URL, sql: str) -> object:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(text(sql))).scalar()
    finally:
        await engine.dispose()


def test_postgres_urls_become_asyncpg() -> None:
    for given in (
        "postgresql://u@h:5433/db",
        "postgres://u@h:5433/db",
        "postgresql+psycopg2://u@h:5433/db",
        "postgresql+asyncpg://u@h:5433/db",
    ):
        url = database_url(given)
        assert url.drivername == "postgresql+asyncpg"
        assert (url.username, url.host, url.port, url.database) == ("u", "h", 5433, "db")
    assert shown(database_url("postgresql://u:hunter2@h/db")) == "postgresql+asyncpg://u:***@h/db"
    assert shown("postgres://u:hunter2@h/db") == "postgres://u:***@h/db"


async def test_migrations_to_head_down_to_base_and_up_again(pg_url: URL) -> None:
    assert await upgrade_to_head(pg_url) == head_revision()
    assert await current_revision(pg_url) == head_revision()
    migrated = await tables(pg_url)
    assert {"nodes", "events", "change_counter", "zone_health", "alembic_version"} <= migrated
    assert await check_drift(pg_url) == []  # `alembic check`: models and schema agree
    assert await upgrade_to_head(pg_url) == head_revision()  # idempotent
    assert await downgrade_to(pg_url, "base") is None
    assert await tables(pg_url) == {"alembic_version"}
    functions = await scalar(pg_url, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'change%'")
    assert functions == 0  # the downgrade dropped the trigger functions too
    assert await upgrade_to_head(pg_url) == head_revision()
    assert await tables(pg_url) == migrated
    await check_readable(pg_url)


def test_the_alembic_command_line_checks_postgres(pg_url: URL) -> None:
    """`alembic -x db=URL upgrade head` then `alembic check`, as an operator runs them."""
    db = pg_url.render_as_string(hide_password=False)
    for args in (["upgrade", "head"], ["check"]):
        result = subprocess.run(
            [sys.executable, "-m", "alembic", "-x", f"db={db}", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
    assert "No new upgrade operations detected" in result.stdout + result.stderr


async def test_someone_elses_database_is_refused(pg_url: URL) -> None:
    engine = make_engine(pg_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE invoices (id int)"))
    finally:
        await engine.dispose()
    with pytest.raises(DatabaseError, match=r"not a tpucared database .*invoices"):
        await upgrade_to_head(pg_url)
    with pytest.raises(DatabaseError, match="no alembic_version"):
        await check_readable(pg_url)


async def test_the_same_values_come_back(pg_url: URL) -> None:
    """Timestamps are timestamptz: aware UTC datetimes (microseconds kept) come back equal,
    whatever zone they were given in; JSON comes back as the same document."""
    await upgrade_to_head(pg_url)
    async with Store.open(pg_url) as store:
        await seed(store, "sweep", 1, T0)
        other_zone = datetime(2025, 6, 1, 14, 0, 0, 123456, tzinfo=UTC).astimezone(
            ZoneInfo("Europe/Paris")
        )
        async with store.write() as tx:
            event = await tx.append_event(
                "test.values", "values", other_zone, details={"b": [1, None], "a": {"x": "é"}}
            )
        (back,) = await store.events(since_id=event.id - 1)
        assert back.at == other_zone
        assert back.at.tzinfo is UTC
        assert back.at.microsecond == 123456
        assert back.details == {"a": {"x": "é"}, "b": [1, None]}
        with pytest.raises(StatementError, match="naive datetime"):
            async with store.write() as tx:
                await tx.append_event("test.naive", "naive", datetime(2025, 1, 1))


async def test_nodes_compare_and_set_and_events(pg_url: URL) -> None:
    await upgrade_to_head(pg_url)
    async with Store.open(pg_url) as store:
        await seed(store, "sweep", 2, T0)
        async with store.write() as tx:
            inc = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-8", T0)
        async with store.write() as tx:
            await tx.transition(inc.id, P.REQUESTED, P.CREATING, T1, operation="op-1")
        with pytest.raises(StaleWrite) as err:
            async with store.write() as tx:
                await tx.transition(inc.id, P.REQUESTED, P.FAILED, T1)
        assert (err.value.expected, err.value.actual) == (P.REQUESTED, P.CREATING)
        async with store.write() as tx:
            await tx.record_cloud(inc.id, P.CREATING, facts(workers=2), T1)
            await tx.transition(inc.id, P.CREATING, P.READY, T1)
        snap = await store.load_snapshot()
        assert snap.nodes[("sweep", 0, 0)].phase is P.READY
        kinds = [e.kind for e in await store.events(since_id=0, limit=100)]
        assert kinds.count("node.requested") == 1
        assert "node.ready" in kinds
        # events are append-only in the database itself (a plpgsql trigger)
        engine = make_engine(pg_url)
        try:
            with pytest.raises(DBAPIError, match="append-only"):
                async with engine.begin() as conn:
                    await conn.execute(text("UPDATE events SET message = 'x'"))
        finally:
            await engine.dispose()


async def test_adopt_many_on_postgres(pg_url: URL) -> None:
    await upgrade_to_head(pg_url)
    async with Store.open(pg_url) as store:
        await seed(store, "sweep", 0, T0)
        adopts = [
            Adopt(
                reason="found",
                fleet="sweep",
                slot=slot,
                node_name=f"sweep-{slot}",
                zone="z-a",
                accelerator_type="v4-8",
                phase=P.READY,
                queued_resource=None,
                cloud=facts(workers=2),
                end_reason=None,
                project="",
            )
            for slot in range(50)
        ]
        async with store.write() as tx:
            refused = await tx.adopt_many(adopts, T0)
        assert refused == [None] * 50
        snap = await store.load_snapshot()
        assert len(snap.nodes) == 50
        assert all(len(snap.workers[n.id]) == 2 for n in snap.nodes.values())


async def test_the_change_counter_moves_with_every_write(pg_url: URL) -> None:
    await upgrade_to_head(pg_url)
    async with Store.open(pg_url) as store:
        await seed(store, "sweep", 2, T0)
        before = await scalar(pg_url, "SELECT counter FROM change_counter")
        first = await store.load_snapshot()
        assert await store.load_snapshot() is first  # nothing written: the same snapshot
        assert store.records.snapshot_hits == 1
        async with store.write() as tx:
            await tx.request_node("sweep", 1, "sweep-1", "z-a", "v4-8", T0)
        after = await scalar(pg_url, "SELECT counter FROM change_counter")
        assert isinstance(before, int)
        assert isinstance(after, int)
        assert after > before
        changed = await store.load_snapshot()
        assert changed is not first
        assert ("sweep", 1, 0) in changed.nodes
        assert changed.slots[("sweep", 0)] is first.slots[("sweep", 0)]  # records reused
        # Another connection's write (another process, `psql`) is seen too.
        engine = make_engine(pg_url)
        try:
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE slots SET last_error = 'x' WHERE slot = 0"))
        finally:
            await engine.dispose()
        again = await store.load_snapshot()
        assert again.slots[("sweep", 0)].last_error == "x"


async def test_read_transactions_are_read_only_snapshots(pg_url: URL) -> None:
    await upgrade_to_head(pg_url)
    async with Store.open(pg_url) as store:
        async with store.read() as r:
            conn = r._conn
            level = (await conn.execute(text("SHOW transaction_isolation"))).scalar()
            read_only = (await conn.execute(text("SHOW transaction_read_only"))).scalar()
        assert (level, read_only) == ("repeatable read", "on")
        async with store.write() as tx:
            level = (await tx._conn.execute(text("SHOW transaction_isolation"))).scalar()
        assert level == "read committed"
    async with Store.open(pg_url, read_only=True) as store, store.read() as r:
        read_only = (await r._conn.execute(text("SHOW transaction_read_only"))).scalar()
        assert read_only == "on"


async def test_a_password_from_pgpass_or_the_environment(
    postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg reads PGPASSWORD, then the libpq password file (PGPASSFILE or ~/.pgpass),
    when the URL has no password; the password is never shown."""
    name = postgres.create_database(owner=PASSWORD_USER)
    try:
        monkeypatch.delenv("PGPASSWORD", raising=False)
        url = postgres.url(name, user=PASSWORD_USER)
        monkeypatch.setenv("PGPASSFILE", str(tmp_path / "missing"))
        with pytest.raises(DatabaseError) as refused:
            await upgrade_to_head(url)
        assert str(refused.value).startswith(shown(url))
        assert PASSWORD not in str(refused.value)

        pgpass = tmp_path / "pgpass"
        pgpass.write_text(f"127.0.0.1:{postgres.port}:{name}:{PASSWORD_USER}:{PASSWORD}\n")
        pgpass.chmod(0o600)
        monkeypatch.setenv("PGPASSFILE", str(pgpass))
        assert await upgrade_to_head(url) == head_revision()

        monkeypatch.setenv("PGPASSFILE", str(tmp_path / "missing"))
        monkeypatch.setenv("PGPASSWORD", PASSWORD)
        await check_readable(url)
        monkeypatch.delenv("PGPASSWORD")

        with_password = postgres.url(name, user=PASSWORD_USER, password=PASSWORD)
        await check_readable(with_password)
        assert PASSWORD not in shown(with_password)
        wrong = postgres.url(name, user=PASSWORD_USER, password="wrong-one")
        with pytest.raises(DatabaseError, match="wrong password") as err:
            await check_readable(wrong)
        assert "wrong-one" not in str(err.value)
    finally:
        postgres.drop_database(name)


async def test_an_unreachable_server_is_one_line(postgres: PostgresServer) -> None:
    url = postgres.url("nothing", password="hunter2").set(port=1)
    with pytest.raises(DatabaseError, match="cannot connect to the PostgreSQL server") as err:
        await upgrade_to_head(url)
    assert "hunter2" not in str(err.value)
    with pytest.raises(DatabaseError, match="no such database"):
        await upgrade_to_head(postgres.url("no_such_database"))


async def test_the_psql_queries_of_the_docs_run(pg_url: URL, postgres: PostgresServer) -> None:
    """docs/inspecting.md's "On PostgreSQL" queries, run with the real psql."""
    doc = (ROOT / "docs" / "inspecting.md").read_text(encoding="utf-8")
    section = doc.split("## On PostgreSQL", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```text\n")[1:]]
    queries = [q.strip() for b in blocks for q in b.split(";") if q.strip()]
    assert len(queries) == 4  # the three that differ from SQLite's, and who leads
    await upgrade_to_head(pg_url)
    async with Store.open(pg_url) as store:
        await seed(store, "sweep", 4, T0)
        async with store.write() as tx:
            inc = await tx.request_node("sweep", 3, "sweep-3", "z-a", "v4-8", T0)
            await tx.transition(inc.id, P.REQUESTED, P.READY, T0, cloud=facts())
    assert pg_url.database is not None
    for query in queries:
        postgres.psql(query, pg_url.database)
    leader = postgres.psql(queries[3], pg_url.database).split("|")
    assert leader[:3] == ["", "", "0"]  # no daemon ever led on this database
    life = postgres.psql(queries[1], pg_url.database).splitlines()
    assert [line.split("|")[1:3] for line in life] == [["", "requested"], ["requested", "ready"]]
