"""Zone health: whether each (project, zone) could be listed; one definition of preemption.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

`zone_health` has one row per (project, zone) the daemon has listed: `failures` counts the
consecutive ticks whose list failed (0 once a list succeeds again), `error_kind` and
`error_message` are the last failure's, `failing_since` when the current run of failures
began, `unreachable` whether `zone.unreachable` was told for it. The daemon writes a row only
when it changes. Not in the change counter's tables: the planner's snapshot does not read it.

`v_preemptions_per_fleet` counted only nodes with `end_reason = 'preempted'`, while
`slots.preemptions` (and `status`, and the metrics) count every unplanned death of a READY
node: PREEMPTED, TERMINATED, STOPPED, vanished, unhealthy or stuck past its timeout, a dead
queued resource, deleted outside tpucared (`budget.node_died`, `add_preemptions = 1`). Each of
those is recorded by a node event whose `details.slot_update.add_preemptions` is positive, in
the same transaction as the counter, and events are append-only: the view now sums those, so
it equals the sum of `slots.preemptions` of the fleet. SQLite only, like the views of 0001.
`unreachable` defaults to `false()`: `0` on SQLite, `false` on PostgreSQL.
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


ADDED = "json_extract(details, '$.slot_update.add_preemptions')"

PREEMPTIONS_PER_FLEET = f"""
    -- Nodes lost while serving, per fleet (zero for fleets never preempted): every event
    -- that added to slots.preemptions (preempted, terminated, stopped, vanished, unhealthy,
    -- stuck, deleted outside tpucared), so the view equals the sum of slots.preemptions.
    SELECT f.name AS fleet,
           coalesce(sum(p.added), 0) AS preemptions,
           count(DISTINCT p.slot) AS slots_hit,
           min(p.at) AS first_at,
           max(p.at) AS last_at
    FROM fleets AS f
    LEFT JOIN (SELECT fleet, slot, at, {ADDED} AS added
                 FROM events
                WHERE {ADDED} > 0) AS p ON p.fleet = f.name
    GROUP BY f.name
"""

# 0001's definition, restored by the downgrade.
PREEMPTIONS_PER_FLEET_0001 = """
    -- Preempted incarnations per fleet (zero for fleets never preempted).
    SELECT f.name AS fleet,
           count(n.id) AS preemptions,
           count(DISTINCT n.slot) AS slots_hit,
           min(n.dead_at) AS first_at,
           max(n.dead_at) AS last_at
    FROM fleets AS f
    LEFT JOIN nodes AS n ON n.fleet = f.name AND n.end_reason = 'preempted'
    GROUP BY f.name
"""


def _replace_view(body: str) -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("DROP VIEW IF EXISTS v_preemptions_per_fleet")
        op.execute(f"CREATE VIEW v_preemptions_per_fleet AS {body.strip()}")


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
        sa.Column("unreachable", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("failures >= 0", name=op.f("ck_zone_health_failures_not_negative")),
        sa.PrimaryKeyConstraint("project", "zone", name=op.f("pk_zone_health")),
    )
    _replace_view(PREEMPTIONS_PER_FLEET)


def downgrade() -> None:
    _replace_view(PREEMPTIONS_PER_FLEET_0001)
    op.drop_table("zone_health")
