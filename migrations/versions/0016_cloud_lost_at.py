"""The cloud's own time of a node's loss: `nodes.cloud_lost_at`.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29

`dead_at` is when the daemon noticed a node was lost. Where the cloud says when it lost the
node (a Compute Engine preemption or host-maintenance record: its zone operation's
`insertTime`, core/nodes/preemption.py), that instant is kept here, so the ledger's recovery
starts at the loss and its detection sub-phase is the time the daemon took to notice (issue
42). NULL: the cloud gave no time (a TPU API node's PREEMPTED state carries none), or the
node was not lost. In place (ALTER TABLE), not by batch mode's copy of the table: the copy
would lose the change counter's triggers. This file is a frozen snapshot: it must not import
tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("cloud_lost_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE nodes DROP COLUMN cloud_lost_at")
