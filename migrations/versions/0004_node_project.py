"""Node project: the project each node incarnation lives in.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25

A fleet may name its own `project` (TRC grants often come per project): `nodes.project` is
where its nodes were created or adopted, so that every later call (delete, guest attributes)
goes to that project, and a node of a fleet removed from the config is still listed and
deleted where it is. '' is the daemon's own project (`gcp.project`), which every node recorded
before this revision lives in. This file is a frozen snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# In place (ALTER TABLE), not by batch mode's copy of the table: the copy would lose the
# change counter's triggers on `nodes`.
def upgrade() -> None:
    op.add_column(
        "nodes",
        sa.Column("project", sa.String(length=63), nullable=False, server_default=sa.text("''")),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE nodes DROP COLUMN project")
