"""Maintenance handling: what the daemon did about a node's announced window.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28

A fleet's `on_maintenance` policy (issue 41 item 2) acts once per announced window: it asks the
workload to checkpoint `maintenance_lead` before the window, and may then start the maintenance
early or replace the node. So that a restart neither asks twice nor forgets that the attempt's
end was its own doing, `nodes` records the window start it acted on
(`maintenance_handled_for`), when the workload got its stop signal (`maintenance_checkpoint_at`)
and when the daemon asked the cloud to start the maintenance now (`maintenance_started_at`).
NULL: nothing done. In place (ALTER TABLE), not by batch mode's copy of the table: the copy would
lose the change counter's triggers on `nodes`. This file is a frozen snapshot: it must not import
tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("maintenance_handled_for", "maintenance_checkpoint_at", "maintenance_started_at")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("nodes", sa.Column(name, sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for name in reversed(COLUMNS):
        op.execute(f"ALTER TABLE nodes DROP COLUMN {name}")
