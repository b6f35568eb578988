"""Zone list backoff: when a failing (project, zone) is listed next.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26

A location whose list failed (an error, a malformed answer, no answer within its deadline) is
asked again only after a backoff that doubles from one poll interval to a cap of minutes, and
`zone_health.next_list_at` says when (NULL while the zone lists fine): `tpucared status` and
/metrics show it. This file is a frozen snapshot: it must not import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "zone_health", sa.Column("next_list_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("zone_health", "next_list_at")
