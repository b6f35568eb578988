"""Zone health: whether each (project, zone) could be listed, recorded by the daemon.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

`zone_health` has one row per (project, zone) the daemon has listed: `failures` counts the
consecutive ticks whose list failed (0 once a list succeeds again), `error_kind` and
`error_message` are the last failure's, `failing_since` when the current run of failures
began, `unreachable` whether `zone.unreachable` was told for it. The daemon writes a row only
when it changes. Not in the change counter's tables: the planner's snapshot does not read it.
This file is a frozen snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "zone_health",
        sa.Column("project", sa.String(length=63), nullable=False),
        sa.Column("zone", sa.String(length=64), nullable=False),
        sa.Column("failures", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("error_kind", sa.String(length=32), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_ok_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("unreachable", sa.Boolean(), server_default=sa.text("0"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("failures >= 0", name=op.f("ck_zone_health_failures_not_negative")),
        sa.PrimaryKeyConstraint("project", "zone", name=op.f("pk_zone_health")),
    )


def downgrade() -> None:
    op.drop_table("zone_health")
