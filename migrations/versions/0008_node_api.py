"""Node API: the cloud API that made each node incarnation.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26

A fleet names its cloud API (`[[fleet]] api`: "tpu", the Cloud TPU API, or "compute", Compute
Engine, issue 27). `nodes.api` records which one made (or adopted) each incarnation, so that a
node of a fleet removed from the config, or whose `api` changed, is still listed, polled and
deleted through the cloud that has it. 'tpu' for every node recorded before this revision:
every fleet was a TPU API fleet then. In place (ALTER TABLE), not by batch mode's copy of the
table: the copy would lose the change counter's triggers on `nodes`. This file is a frozen
snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "nodes",
        sa.Column("api", sa.String(length=16), nullable=False, server_default=sa.text("'tpu'")),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE nodes DROP COLUMN api")
