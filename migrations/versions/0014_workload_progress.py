"""Workload progress: what the workload told in its progress file (TPUCARED_PROGRESS_FILE).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28

The workload may append `step N` and `checkpoint N` lines to its progress file (issue 42 item
3); the daemon's probes read worker 0's and record on the attempt its first step's time, its
last step and checkpoint and their times. The ledger (core/ledger/tiling.py) splits startup from
training with them and measures the progress a loss wasted. NULL: the workload told nothing.
In place (ALTER TABLE), not by batch mode's copy of the table: the copy would lose the change
counter's triggers. This file is a frozen snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("first_step_at", sa.DateTime(timezone=True)),
    ("last_step", sa.BigInteger()),
    ("last_step_at", sa.DateTime(timezone=True)),
    ("last_checkpoint", sa.BigInteger()),
    ("last_checkpoint_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column("workload_attempts", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    for name, _ in reversed(COLUMNS):
        op.execute(f"ALTER TABLE workload_attempts DROP COLUMN {name}")
