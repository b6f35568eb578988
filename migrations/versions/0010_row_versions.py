"""Row versions: each row of the snapshot's big tables says when it last changed.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27

The change counter (0002) tells a reader whether anything changed since its last snapshot,
not what: in a preemption storm something changes between every two reads, and the daemon
read every slot, live incarnation and worker again (tens of thousands of rows at 10,000 nodes,
most of a storm tick's plan phase; docs/benchmarks.md). Now each row of `slots`, `nodes`,
`workload_attempts` and `create_attempts` carries `version`: the counter's value when it was
last inserted or updated, set by the same triggers that bump the counter. A reader that kept
its last snapshot and the counter then reads only the rows whose version is newer
(tpucared/store/reads.py). A worker's change touches its incarnation's row (a worker has no
version of its own: the reader reads again the workers of the incarnations that changed).

Rows that go away leave no version to find: every delete from those tables (and from
`fleets`) also bumps `change_counter.deletions`, and a reader that sees it move reads
everything again. Deletes are rare: pruning, a fleet forgotten.

Why versions are safe to compare: writers are serialised from their first stamp to their
commit (SQLite has one write transaction at a time; on PostgreSQL, the counter row's lock is
held until commit), so once a reader sees counter C committed, no row stamped C or less can
still appear.

SQLite cannot change NEW in a trigger: the AFTER trigger updates the row it fires for, and
the update trigger fires only when an UPDATE left `version` unchanged (its own stamping
changes it, so it does not fire itself again). PostgreSQL stamps NEW in a BEFORE trigger.
This file is a frozen snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VERSIONED = ("slots", "nodes", "workload_attempts", "create_attempts")
COUNTED = ("fleets", "slots", "nodes", "workers", "workload_attempts", "create_attempts")
OPERATIONS = ("INSERT", "UPDATE", "DELETE")


def _trigger(table: str, operation: str) -> str:
    return f"{table}_{operation.lower()}_counts"  # 0002's names, reused


BUMP = "UPDATE change_counter SET counter = counter + 1 WHERE id = 1"
BUMP_DELETED = (
    "UPDATE change_counter SET counter = counter + 1, deletions = deletions + 1 WHERE id = 1"
)
STAMP = "(SELECT counter FROM change_counter WHERE id = 1)"

PG_STAMP = """
    CREATE FUNCTION change_counter_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE change_counter SET counter = counter + 1 WHERE id = 1
            RETURNING counter INTO NEW.version;
        RETURN NEW;
    END
    $$
"""
PG_DELETED = """
    CREATE FUNCTION change_counter_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE change_counter SET counter = counter + 1, deletions = deletions + 1
            WHERE id = 1;
        RETURN NULL;
    END
    $$
"""
PG_WORKER = """
    CREATE FUNCTION change_counter_worker() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            UPDATE nodes SET version = version WHERE id = OLD.node_id;
        ELSE
            UPDATE nodes SET version = version WHERE id = NEW.node_id;
        END IF;
        RETURN NULL;
    END
    $$
"""


def _sqlite_triggers() -> list[str]:
    out = []
    for table in VERSIONED:
        stamp = f"UPDATE {table} SET version = {STAMP} WHERE rowid = NEW.rowid"
        out.append(
            f"CREATE TRIGGER {_trigger(table, 'INSERT')} AFTER INSERT ON {table} "
            f"BEGIN {BUMP}; {stamp}; END"
        )
        out.append(
            f"CREATE TRIGGER {_trigger(table, 'UPDATE')} AFTER UPDATE ON {table} "
            f"WHEN NEW.version = OLD.version BEGIN {BUMP}; {stamp}; END"
        )
        out.append(
            f"CREATE TRIGGER {_trigger(table, 'DELETE')} AFTER DELETE ON {table} "
            f"BEGIN {BUMP_DELETED}; END"
        )
    for operation in ("INSERT", "UPDATE"):
        out.append(
            f"CREATE TRIGGER {_trigger('workers', operation)} AFTER {operation} ON workers "
            "BEGIN UPDATE nodes SET version = version WHERE id = NEW.node_id; END"
        )
    out.append(
        f"CREATE TRIGGER {_trigger('workers', 'DELETE')} AFTER DELETE ON workers "
        "BEGIN UPDATE nodes SET version = version WHERE id = OLD.node_id; END"
    )
    out.append(
        f"CREATE TRIGGER {_trigger('fleets', 'DELETE')} AFTER DELETE ON fleets "
        f"BEGIN {BUMP_DELETED}; END"
    )
    return out


def _postgres_triggers() -> list[str]:
    out = [PG_STAMP.strip(), PG_DELETED.strip(), PG_WORKER.strip()]
    for table in VERSIONED:
        out.append(
            f"CREATE TRIGGER {table}_stamps BEFORE INSERT OR UPDATE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION change_counter_stamp()"
        )
        out.append(
            f"CREATE TRIGGER {_trigger(table, 'DELETE')} AFTER DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION change_counter_deleted()"
        )
    out.append(
        "CREATE TRIGGER workers_touch_nodes AFTER INSERT OR UPDATE OR DELETE ON workers "
        "FOR EACH ROW EXECUTE FUNCTION change_counter_worker()"
    )
    out.append(
        f"CREATE TRIGGER {_trigger('fleets', 'DELETE')} AFTER DELETE ON fleets "
        "FOR EACH ROW EXECUTE FUNCTION change_counter_deleted()"
    )
    return out


def _drop_counting(dialect: str, tables: Sequence[str], operations: Sequence[str]) -> None:
    for table in tables:
        for operation in operations:
            on = f" ON {table}" if dialect == "postgresql" else ""
            op.execute(f"DROP TRIGGER IF EXISTS {_trigger(table, operation)}{on}")


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    big = sa.BigInteger() if dialect == "postgresql" else sa.Integer()
    op.add_column(
        "change_counter",
        sa.Column("deletions", big, server_default=sa.text("0"), nullable=False),
    )
    for table in VERSIONED:
        op.add_column(table, sa.Column("version", big, server_default=sa.text("0"), nullable=False))
        op.create_index(f"ix_{table}_version", table, ["version"])
    if dialect == "sqlite":
        _drop_counting(dialect, [*VERSIONED, "workers"], OPERATIONS)
        _drop_counting(dialect, ["fleets"], ["DELETE"])
        for statement in _sqlite_triggers():
            op.execute(statement)
    elif dialect == "postgresql":
        _drop_counting(dialect, [*VERSIONED, "workers"], OPERATIONS)
        _drop_counting(dialect, ["fleets"], ["DELETE"])
        for statement in _postgres_triggers():
            op.execute(statement)


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "sqlite":
        _drop_counting(dialect, [*VERSIONED, "workers"], OPERATIONS)
        _drop_counting(dialect, ["fleets"], ["DELETE"])
        for table in ("slots", "nodes", "workers", "workload_attempts", "create_attempts"):
            for operation in OPERATIONS:
                op.execute(
                    f"CREATE TRIGGER {_trigger(table, operation)} AFTER {operation} ON {table} "
                    f"BEGIN {BUMP}; END"
                )
        op.execute(
            f"CREATE TRIGGER {_trigger('fleets', 'DELETE')} AFTER DELETE ON fleets "
            f"BEGIN {BUMP}; END"
        )
    elif dialect == "postgresql":
        for table in VERSIONED:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_stamps ON {table}")
        op.execute("DROP TRIGGER IF EXISTS workers_touch_nodes ON workers")
        _drop_counting(dialect, [*VERSIONED, "fleets"], ["DELETE"])
        op.execute("DROP FUNCTION IF EXISTS change_counter_stamp()")
        op.execute("DROP FUNCTION IF EXISTS change_counter_deleted()")
        op.execute("DROP FUNCTION IF EXISTS change_counter_worker()")
        for table in COUNTED:
            for operation in OPERATIONS:
                if table == "fleets" and operation != "DELETE":
                    continue  # never dropped
                op.execute(
                    f"CREATE TRIGGER {_trigger(table, operation)} AFTER {operation} ON {table} "
                    "FOR EACH ROW EXECUTE FUNCTION change_counter_bump()"
                )
    for table in VERSIONED:
        op.drop_index(f"ix_{table}_version", table_name=table)
        op.execute(f"ALTER TABLE {table} DROP COLUMN version")
    op.execute("ALTER TABLE change_counter DROP COLUMN deletions")
