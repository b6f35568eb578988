"""Multislice: a slot of several slices, one live node per slice.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

`[[fleet]] slices = N` makes each slot N slices running one job (README "Multislice"). A node
incarnation records which slice it is (`nodes.slice`, 0 for every node recorded before: a
single-slice slot's node is its slice 0), and the live-incarnation unique index moves from
(fleet, slot) to (fleet, slot, slice). `slots.held_since`: since when a direct multislice
slot keeps READY slices while another is missing (released after `multislice_hold`). In place
(ALTER TABLE, CREATE/DROP INDEX), not by batch mode's copy of a table: the copy would lose the
change counter's triggers on `nodes`. This file is a frozen snapshot: it must not import
tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The live phases of core.lifecycle.LIVE_PHASES at the time of this revision.
LIVE = "phase IN ('creating', 'dead', 'deleting', 'ready', 'requested')"


def upgrade() -> None:
    op.add_column(
        "nodes", sa.Column("slice", sa.Integer(), nullable=False, server_default=sa.text("0"))
    )
    op.add_column("slots", sa.Column("held_since", sa.DateTime(timezone=True), nullable=True))
    op.drop_index("uq_nodes_live_slot", table_name="nodes")
    op.create_index(
        "uq_nodes_live_slice",
        "nodes",
        ["fleet", "slot", "slice"],
        unique=True,
        sqlite_where=sa.text(LIVE),
        postgresql_where=sa.text(LIVE),
    )


def downgrade() -> None:
    # Refused while a slot has two live slices: the old index cannot hold them.
    op.drop_index("uq_nodes_live_slice", table_name="nodes")
    op.create_index(
        "uq_nodes_live_slot",
        "nodes",
        ["fleet", "slot"],
        unique=True,
        sqlite_where=sa.text(LIVE),
        postgresql_where=sa.text(LIVE),
    )
    op.execute("ALTER TABLE slots DROP COLUMN held_since")
    op.execute("ALTER TABLE nodes DROP COLUMN slice")
