"""Change counter: one row that every write to the snapshot's tables bumps.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21

The daemon reads the planner's snapshot (fleets, slots, live incarnations, their workers, the
newest attempts) twice a tick; at 10,000 nodes that is tens of thousands of rows, while most
ticks change nothing. Triggers bump `change_counter.counter` in the same transaction as any
insert, update or delete on those tables, whichever process writes, so one single-row query
tells a reader whether its previous snapshot is still the database's (tpucared.store.cache).
SQLite: one trigger per table and operation, each row bumping the counter. PostgreSQL: the
same row-level triggers, calling one plpgsql function, and a BIGINT counter (SQLite's INTEGER is
already 64 bits; a 32-bit one would overflow within weeks at 10,000 nodes, and then refuse every
write). This file is a frozen snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The tables the snapshot reads (events are followed by id, not through the counter).
TABLES = ("fleets", "slots", "nodes", "workers", "workload_attempts", "create_attempts")
OPERATIONS = ("INSERT", "UPDATE", "DELETE")


def _trigger(table: str, operation: str) -> str:
    return f"{table}_{operation.lower()}_counts"


BUMP_FUNCTION = """
    CREATE FUNCTION change_counter_bump() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE change_counter SET counter = counter + 1 WHERE id = 1;
        RETURN NULL;
    END
    $$
"""


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    op.create_table(
        "change_counter",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column(
            "counter",
            sa.BigInteger() if dialect == "postgresql" else sa.Integer(),
            server_default=sa.text("0"),
            nullable=False,
        ),
        sa.CheckConstraint("id = 1", name=op.f("ck_change_counter_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_counter")),
    )
    op.execute("INSERT INTO change_counter (id, counter) VALUES (1, 0)")
    if dialect == "sqlite":
        for table in TABLES:
            for operation in OPERATIONS:
                op.execute(
                    f"CREATE TRIGGER {_trigger(table, operation)} AFTER {operation} ON {table} "
                    "BEGIN UPDATE change_counter SET counter = counter + 1 WHERE id = 1; END"
                )
    elif dialect == "postgresql":
        op.execute(BUMP_FUNCTION.strip())
        for table in TABLES:
            for operation in OPERATIONS:
                op.execute(
                    f"CREATE TRIGGER {_trigger(table, operation)} AFTER {operation} ON {table} "
                    "FOR EACH ROW EXECUTE FUNCTION change_counter_bump()"
                )


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect in ("sqlite", "postgresql"):
        for table in TABLES:
            for operation in OPERATIONS:
                on = f" ON {table}" if dialect == "postgresql" else ""
                op.execute(f"DROP TRIGGER IF EXISTS {_trigger(table, operation)}{on}")
    if dialect == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS change_counter_bump()")
    op.drop_table("change_counter")
