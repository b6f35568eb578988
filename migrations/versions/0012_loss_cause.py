"""Loss causes: why each node incarnation was lost, in one vocabulary.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28

`nodes.loss_cause` records why an incarnation ended (tpucared/core/model/causes.py:
preempted, maintenance, run_ended, bad_host, deleted_outside, stuck, crash, unknown; issue
41). NULL: not lost (still live, or ended by our own choice such as a scale-down), and every
node recorded before this revision. In place (ALTER TABLE), not by batch mode's copy of the
table: the copy would lose the change counter's triggers on `nodes`. This file is a frozen
snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("loss_cause", sa.String(32), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE nodes DROP COLUMN loss_cause")
