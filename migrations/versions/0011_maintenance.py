"""Maintenance windows: a node's next host-maintenance window, as last listed.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28

Both clouds announce scheduled host maintenance on the node (TPU API `Node.upcomingMaintenance`,
Compute Engine `Instance.resourceStatus.upcomingMaintenance`; issue 41). `nodes.maintenance`
records the next window as a JSON document (start, end, type, status, can_reschedule), so that
`status`, the metrics and the events show it. NULL: none announced, and for every node recorded
before this revision. In place (ALTER TABLE), not by batch mode's copy of the table: the copy
would lose the change counter's triggers on `nodes`. This file is a frozen snapshot: it must not
import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("maintenance", sa.Text(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE nodes DROP COLUMN maintenance")
