"""Shared by the decision tables for one live incarnation (test_incarnations_*.py): one fleet
of one slot (SPEC), a plan for one recorded incarnation, and the records the tables start
from (a READY node's, a create's still pending).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tpucared.core.model.observed import ObservedNode, ZoneObservation
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import FleetSpec
from tpucared.core.vocab.plan import Plan
from tpucared.gcp.tpu.states import NodeState

from ..core_support import T0, deletes, edges, inc, node, run, seen, snapshot, spec

P = NodePhase
C = NodeState
SPEC = spec(size=1)


def plan_for(
    record: IncarnationRecord,
    observations: list[ZoneObservation],
    reported: frozenset[str] = frozenset(),
    fleet: FleetSpec = SPEC,
) -> Plan:
    return run([fleet], observations, snapshot(record, specs=[fleet]), reported=reported)


# A table's row: its name, the incarnation as recorded, what the zone's list shows, and the
# phase edges and deletes the plan must hold for it (kopf-style: the table is the spec).
Row = tuple[str, IncarnationRecord, list[ZoneObservation], list[tuple[str, str]], list[str]]


def by_row(table: list[Row]) -> pytest.MarkDecorator:
    """Runs a test once per row of `table` (its `row` argument), named by the row's name."""
    return pytest.mark.parametrize("row", table, ids=[r[0] for r in table])


def check_row(row: Row, fleet: FleetSpec = SPEC) -> Plan:
    """The plan for the row's record and list (of `fleet`) holds the row's edges and deletes."""
    _, record, observations, want_edges, want_deletes = row
    p = plan_for(record, observations, fleet=fleet)
    assert edges(p, 1) == want_edges
    assert deletes(p) == want_deletes
    return p


def ready(
    n: ObservedNode, *, since: timedelta = timedelta(minutes=5), **kw: object
) -> IncarnationRecord:
    return seen(inc(1, 0, P.READY, since=T0 - since, **kw), n)  # type: ignore[arg-type]


READY_NODE = node()


def pending(
    phase: NodePhase, age: timedelta = timedelta(minutes=1), **kw: object
) -> IncarnationRecord:
    return inc(1, 0, phase, since=T0 - age, **kw)  # type: ignore[arg-type]
