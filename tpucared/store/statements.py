"""Statements built once and executed many times with parameters.

Where it sits: the writers (write_nodes.py) ask here for the statement of a write they make
thousands of times a tick in a preemption storm. SQLAlchemy builds a statement per call in
Python (each value coerced, the cache key computed), which cost more than executing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.sql.elements import ClauseElement

from tpucared.store.models import NodeRow, SlotRow

# One incarnation by id (`inc_id`), one slot by (`slot_fleet`, `slot_index`): read before most
# writes.
INCARNATION = select(NodeRow.__table__).where(NodeRow.id == bindparam("inc_id"))
SLOT = select(SlotRow.__table__).where(
    SlotRow.fleet == bindparam("slot_fleet"), SlotRow.slot == bindparam("slot_index")
)
# The planner's slot bookkeeping (SlotUpdate): absolute backoff fields, preemptions added.
SLOT_UPDATE = (
    update(SlotRow)
    .where(SlotRow.fleet == bindparam("slot_fleet"), SlotRow.slot == bindparam("slot_index"))
    .values(
        create_failures=bindparam("v_create_failures"),
        next_create_at=bindparam("v_next_create_at"),
        next_zone=bindparam("v_next_zone"),
        last_error=bindparam("v_last_error"),
        preemptions=SlotRow.preemptions + bindparam("v_add_preemptions"),
    )
)

# The compare-and-set UPDATEs by the columns they write (and the SQL of any expression among
# them, e.g. `delete_calls + 1`): built and compiled once each, then executed with the values
# as parameters. A statement built anew per call cost more than its execution (SQLAlchemy's
# coercion and cache key of every value), thousands of times a tick in a preemption storm.
CAS_STATEMENTS: dict[tuple[tuple[str, str], ...], Any] = {}


def cas_statement(values: Mapping[str, object]) -> Any:
    """`UPDATE nodes SET <values> WHERE id = :cas_id AND phase = :cas_expected RETURNING *`:
    each plain value as the parameter `v_<column>`, an expression (ClauseElement) inline."""
    shape = tuple(
        (k, str(v) if isinstance(v, ClauseElement) else "") for k, v in sorted(values.items())
    )
    stmt = CAS_STATEMENTS.get(shape)
    if stmt is None:
        columns = {
            k: v if isinstance(v, ClauseElement) else bindparam(f"v_{k}") for k, v in values.items()
        }
        stmt = (
            update(NodeRow)
            .where(NodeRow.id == bindparam("cas_id"), NodeRow.phase == bindparam("cas_expected"))
            .values(columns)
            .returning(*NodeRow.__table__.c)
        )
        CAS_STATEMENTS[shape] = stmt
    return stmt
