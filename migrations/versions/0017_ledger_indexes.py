"""Indexes for the ledger's reads: `workload_attempts (fleet, slot, ended_at)`,
`create_attempts (fleet, slot, started_at)` and `nodes (fleet, slot, requested_at)`.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29

`tpucared goodput` reads, per slot, only the records that matter from a time on (the end of
its kept days, or `--since`): the attempts ended since and the create attempts begun since,
the newest of each before, and the slot's first create (store/ledger_reads.py). Without
these indexes each read compared every row of a table with its slot's time (400,000 rows a
table at 10,000 slots x 30 days, for a few a slot); with them, each slot's rows are a range
of one index (issue 42, docs/benchmarks.md). This file is a frozen snapshot: it must not
import tpucared.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        op.f("ix_workload_attempts_fleet_slot_ended_at"),
        "workload_attempts",
        ["fleet", "slot", "ended_at"],
    )
    op.create_index(
        op.f("ix_create_attempts_fleet_slot_started_at"),
        "create_attempts",
        ["fleet", "slot", "started_at"],
    )

    op.create_index(
        op.f("ix_nodes_fleet_slot_requested_at"), "nodes", ["fleet", "slot", "requested_at"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_nodes_fleet_slot_requested_at"), "nodes")
    op.drop_index(op.f("ix_create_attempts_fleet_slot_started_at"), "create_attempts")
    op.drop_index(op.f("ix_workload_attempts_fleet_slot_ended_at"), "workload_attempts")
