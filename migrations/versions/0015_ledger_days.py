"""The ledger's closed days: `ledger_days`, `ledger_totals`, `ledger_kept`, and the view
`v_slot_ledger`.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29

`tpucared goodput` tiles every slot's records into its ledger (issue 42); over 30 days of a
10,000-slot fleet that took a minute. The daemon's maintenance task now keeps each slot's
days that can no longer change (core/ledger/kept.py says which) in `ledger_days`: per slot,
UTC day, category, sub-phase and loss cause ('' for none), the seconds in integer
microseconds and the steps lost; `ledger_totals` the same summed over the slot's kept days
(a whole-history read takes one row per slot and category, not one per day). `ledger_kept`
says per slot up to which midnight the days are kept; all three are written in one
transaction, so a kill -9 leaves all or none. All are derived from the records: dropping
them loses nothing but time. `v_slot_ledger` sums the kept days per slot and category for a
person with `sqlite3` or `psql` (docs/inspecting.md); the same SQL on both engines. Not in
the change counter's tables (the snapshot does not read them). This file is a frozen
snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEW = """
    -- Per slot and category, the kept (closed) days of its ledger: how many days, the first
    -- and the last, the seconds and the share of the slot's kept time.
    SELECT d.fleet, d.slot, d.category,
           count(DISTINCT d.day) AS days,
           min(d.day) AS first_day,
           max(d.day) AS last_day,
           round(sum(d.microseconds) / 1000000.0, 1) AS seconds,
           round(100.0 * sum(d.microseconds) / max(t.microseconds), 1) AS share_pct,
           sum(d.steps) AS steps_lost
    FROM ledger_days AS d
    JOIN (SELECT fleet, slot, sum(microseconds) AS microseconds
          FROM ledger_days GROUP BY fleet, slot) AS t
      ON t.fleet = d.fleet AND t.slot = d.slot
    GROUP BY d.fleet, d.slot, d.category
"""


def upgrade() -> None:
    op.create_table(
        "ledger_days",
        sa.Column("fleet", sa.String(length=63), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("cause", sa.String(length=32), nullable=False),
        sa.Column("microseconds", sa.BigInteger(), nullable=False),
        sa.Column("steps", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint(
            "fleet", "slot", "day", "category", "phase", "cause", name=op.f("pk_ledger_days")
        ),
    )
    op.create_table(
        "ledger_totals",
        sa.Column("fleet", sa.String(length=63), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("cause", sa.String(length=32), nullable=False),
        sa.Column("microseconds", sa.BigInteger(), nullable=False),
        sa.Column("steps", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint(
            "fleet", "slot", "category", "phase", "cause", name=op.f("pk_ledger_totals")
        ),
    )
    op.create_table(
        "ledger_kept",
        sa.Column("fleet", sa.String(length=63), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("kept_until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("fleet", "slot", name=op.f("pk_ledger_kept")),
    )
    op.execute(f"CREATE VIEW v_slot_ledger AS {VIEW.strip()}")


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS v_slot_ledger")
    op.drop_table("ledger_kept")
    op.drop_table("ledger_totals")
    op.drop_table("ledger_days")
