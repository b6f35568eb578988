"""Run ends: a flex-start node's planned end.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26

A flex-start Compute Engine VM or slice (`capacity = "flex-start"`, issue 28) runs at most its
`max_run_duration`; the cloud says when (`scheduling.terminationTime`, `ObservedNode.run_ends_at`)
and deletes it then. `nodes.run_ends_at` records it, so that the node's loss near that time is
read as the run's end (core/nodes/flex.py), not a preemption, even once the node is gone from
the lists. NULL for every node recorded before this revision and for other tiers. In place
(ALTER TABLE), not by batch mode's copy of the table: the copy would lose the change counter's
triggers on `nodes`. This file is a frozen snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("run_ends_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE nodes DROP COLUMN run_ends_at")
