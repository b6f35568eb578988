"""Leader lease: which of several `tpucared run` processes on one database leads.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

One row (`id = 1`, inserted here with epoch 0 and no holder), taken and renewed by
compare-and-set on `epoch`, which grows by one at every change of holder; the leader's writes
and cloud calls are fenced by it (docs/daemon.md, "Leader lease"). `holder_*` name the process
(host, pid, a random id per start); `acquired_at`, `renewed_at`, `expires_at` are the
database's clock. `epoch` is BIGINT on PostgreSQL, like the change counter. Not in the change
counter's tables. This file is a frozen snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    op.create_table(
        "leader_lease",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column(
            "epoch",
            sa.BigInteger() if dialect == "postgresql" else sa.Integer(),
            server_default=sa.text("0"),
            nullable=False,
        ),
        sa.Column("holder_host", sa.String(length=255), nullable=True),
        sa.Column("holder_pid", sa.Integer(), nullable=True),
        sa.Column("holder_instance", sa.String(length=36), nullable=True),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("id = 1", name=op.f("ck_leader_lease_single_row")),
        sa.CheckConstraint("epoch >= 0", name=op.f("ck_leader_lease_epoch_not_negative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leader_lease")),
    )
    op.execute("INSERT INTO leader_lease (id, epoch) VALUES (1, 0)")


def downgrade() -> None:
    op.drop_table("leader_lease")
