"""Migrations: empty file to head, down to base and up again, models agree with migrations,
racing migrators, a failed migration leaves nothing behind, and the alembic command line."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from store_support import T0, facts, open_raw, seed

from tpucared.core.model.observed import MaintenanceWindow
from tpucared.store import Store, migrate
from tpucared.store.migrate import (
    MigrationError,
    check_drift,
    current_revision,
    downgrade_to,
    head_revision,
    migrations_dir,
    upgrade_to_head,
)
from tpucared.store.models import metadata

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parent / "store_worker.py"
TABLES = {t.name for t in metadata.sorted_tables}
VIEWS = {
    "v_running_now",
    "v_preemptions_per_fleet",
    "v_slot_goodput",
    "v_create_failures_by_zone",
    "v_slot_ledger",
}
# 0002: every write to the snapshot's tables bumps change_counter.
COUNTED = ("fleets", "slots", "nodes", "workers", "workload_attempts", "create_attempts")
TRIGGERS = {"events_append_only"} | {
    f"{t}_{op}_counts" for t in COUNTED for op in ("insert", "update", "delete")
}


def schema(path: Path) -> dict[str, set[str]]:
    conn = open_raw(path)
    try:
        rows = conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        out: dict[str, set[str]] = {}
        for kind, name in rows:
            out.setdefault(kind, set()).add(name)
        return out
    finally:
        conn.close()


async def test_empty_file_to_head_down_to_base_and_up_again(db_path: Path):
    assert not db_path.exists()  # noqa: ASYNC240 - a test's own tmp file
    assert await upgrade_to_head(db_path) == head_revision()
    objects = schema(db_path)
    assert objects["table"] == TABLES | {"alembic_version"}
    assert objects["view"] == VIEWS
    assert objects["trigger"] == TRIGGERS
    assert {"uq_nodes_live_slice", "uq_workload_attempts_running", "ix_events_at"} <= objects[
        "index"
    ]
    assert await current_revision(db_path) == head_revision()

    assert await downgrade_to(db_path, "base") is None
    assert schema(db_path) == {"table": {"alembic_version"}}

    assert await upgrade_to_head(db_path) == head_revision()
    assert schema(db_path) == objects
    assert await upgrade_to_head(db_path) == head_revision()  # idempotent


async def test_models_and_migrations_agree(migrated: Path):
    assert await check_drift(migrated) == []
    assert await check_drift() == []  # on a scratch database, as CI runs it


async def test_drift_is_detected(migrated: Path):
    raw = open_raw(migrated)
    raw.execute("DROP INDEX ix_events_at")
    raw.execute("ALTER TABLE events ADD COLUMN extra TEXT")
    raw.commit()
    raw.close()
    diffs = {d[0] for d in await check_drift(migrated)}
    assert diffs == {"add_index", "remove_column"}


async def test_data_survives_a_downgrade_and_upgrade_of_nothing(migrated: Path):
    """Upgrading a database that is at head touches nothing."""
    async with Store.open(migrated) as store:
        await seed(store, "sweep", 2, T0)
    await upgrade_to_head(migrated)
    async with Store.open(migrated) as store:
        assert len((await store.load_snapshot()).slots) == 2


async def test_nodes_recorded_before_0008_were_made_by_the_tpu_api(migrated: Path):
    """0008 adds `nodes.api`: every node recorded before it is a TPU API node, and a
    downgrade to 0007 and back keeps the rows."""
    async with Store.open(migrated) as store:
        await seed(store, "sweep", 1, T0)
        async with store.write() as tx:
            await tx.request_node("sweep", 0, "sweep-0", "us-central1-c", "tpu7x-standard-4t", T0,
                                  api="compute")  # fmt: skip
    assert await downgrade_to(migrated, "0007") == "0007"
    assert await upgrade_to_head(migrated) == "0017"
    async with Store.open(migrated) as store:
        [inc] = (await store.load_snapshot()).nodes.values()
    assert (inc.node_name, inc.api) == ("sweep-0", "tpu")


async def test_a_flex_start_node_s_run_end_survives_0009(migrated: Path):
    """0009 adds `nodes.run_ends_at`: recorded with the cloud facts, read back, NULL for
    nodes recorded before it (a downgrade to 0008 and back keeps the rows)."""
    ends = T0 + timedelta(days=7)
    async with Store.open(migrated) as store:
        await seed(store, "sweep", 2, T0)
        async with store.write() as tx:
            flex = await tx.request_node("sweep", 0, "sweep-0", "us-east5-a", "ct6e-standard-4t",
                                         T0, api="compute")  # fmt: skip
            await tx.record_cloud(
                flex.id, flex.phase, replace(facts("RUNNING"), run_ends_at=ends), T0
            )
            await tx.request_node("sweep", 1, "sweep-1", "us-central2-b", "v4-8", T0)
        nodes = (await store.load_snapshot()).nodes.values()
    assert sorted((n.node_name, n.run_ends_at) for n in nodes) == [
        ("sweep-0", ends),
        ("sweep-1", None),
    ]
    assert await downgrade_to(migrated, "0008") == "0008"
    assert await upgrade_to_head(migrated) == "0017"
    async with Store.open(migrated) as store:
        nodes = (await store.load_snapshot()).nodes.values()
    assert {n.run_ends_at for n in nodes} == {None}


async def test_a_maintenance_window_survives_0011(migrated: Path):
    """0011 adds `nodes.maintenance`: recorded with the cloud facts, read back as the core
    value; a downgrade to 0010 and back keeps the rows, the window NULL."""
    window = MaintenanceWindow(T0 + timedelta(days=2), T0 + timedelta(days=2, hours=1),
                               "SCHEDULED", "PENDING", False)  # fmt: skip
    async with Store.open(migrated) as store:
        await seed(store, "sweep", 1, T0)
        async with store.write() as tx:
            inc = await tx.request_node("sweep", 0, "sweep-0", "us-central2-b", "v4-8", T0)
            await tx.record_cloud(
                inc.id, inc.phase, replace(facts("READY"), maintenance=window), T0
            )
        [inc] = (await store.load_snapshot()).nodes.values()
    assert inc.maintenance == window
    assert await downgrade_to(migrated, "0010") == "0010"
    assert await upgrade_to_head(migrated) == "0017"
    async with Store.open(migrated) as store:
        [inc] = (await store.load_snapshot()).nodes.values()
    assert (inc.node_name, inc.maintenance) == ("sweep-0", None)


async def test_a_failed_migration_leaves_nothing_behind(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """All revisions run in one transaction: a failure in the last one undoes the first."""
    scripts = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / "0099_broken.py").write_text(
        'revision = "0099"\ndown_revision = "0017"\nbranch_labels = None\ndepends_on = None\n'
        "from alembic import op\n"
        "def upgrade():\n"
        '    op.execute("CREATE TABLE half_done (x INTEGER)")\n'
        '    raise RuntimeError("migration bug")\n'
        "def downgrade():\n    pass\n"
    )
    monkeypatch.setattr(migrate, "migrations_dir", lambda: scripts)
    with pytest.raises(RuntimeError, match="migration bug"):
        await upgrade_to_head(db_path)
    assert schema(db_path) == {}


def test_migrations_are_found_and_linear():
    # In the source tree tpucared/migrations is a link to the top-level migrations/ (the wheel
    # ships it as package data): both name the same files.
    assert migrations_dir().resolve() == (ROOT / "migrations").resolve()
    assert head_revision() == "0017"


def test_missing_migrations_are_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    fake = tmp_path / "tpucared" / "store" / "migrate.py"
    monkeypatch.setattr(migrate, "__file__", str(fake))
    with pytest.raises(MigrationError, match="migrations are missing"):
        migrations_dir()


async def test_two_processes_migrating_at_once_both_succeed(db_path: Path):
    """Three daemons starting together on a fresh file: all succeed, the schema is built once.
    They import first and migrate on a common signal, so the migrations really overlap."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            "migrate",
            str(db_path),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(3)
    ]
    for p in procs:
        assert p.stdout is not None
        assert await p.stdout.readline() == b"waiting\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
    results = [await p.communicate() for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err.decode()
        assert out.decode().strip() == head_revision()
    assert schema(db_path)["table"] == TABLES | {"alembic_version"}
    conn = open_raw(db_path)
    assert [tuple(r) for r in conn.execute("SELECT * FROM alembic_version")] == [("0017",)]
    conn.close()


def test_alembic_command_line(tmp_path: Path):
    """The top-level alembic.ini works from the repository: upgrade, check, downgrade."""
    alembic = Path(sys.executable).parent / "alembic"
    db = tmp_path / "cli.db"

    def run(*args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [str(alembic), "-c", str(ROOT / "alembic.ini"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    run("-x", f"db={db}", "upgrade", "head")
    assert "No new upgrade operations detected" in run("-x", f"db={db}", "check")
    run("downgrade", "base", env={"TPUCARED_DB": str(db)})
    assert schema(db) == {"table": {"alembic_version"}}


def test_module_entry_point_for_ci_and_operators(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    db = str(tmp_path / "ops.db")
    assert migrate.main(["upgrade", db]) == 0
    assert migrate.main(["current", db]) == 0
    assert migrate.main(["check", db]) == 0
    assert capsys.readouterr().out.splitlines() == ["0017", "0017", "models and migrations agree"]
    assert migrate.main(["nonsense"]) == 2


def test_every_record_field_has_a_column():
    """A field added to a core record needs a column (and a migration) to be remembered."""
    import dataclasses

    from tpucared.core.model import records as model
    from tpucared.store.convert import _RENAMES

    tables = {t.name: set(t.c.keys()) for t in metadata.sorted_tables}
    records = {
        model.FleetRecord: "fleets",
        model.SlotRecord: "slots",
        model.IncarnationRecord: "nodes",
        model.WorkerRecord: "workers",
        model.WorkloadAttemptRecord: "workload_attempts",
        model.CreateAttemptRecord: "create_attempts",
        model.EventRecord: "events",
    }
    for record, table in records.items():
        renames = _RENAMES.get(record, {})
        fields = {renames.get(f.name, f.name) for f in dataclasses.fields(record)}
        assert fields <= tables[table], (record.__name__, sorted(fields - tables[table]))
