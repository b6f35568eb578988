"""Shared by the decision tables for one live incarnation (test_incarnations_*.py): one fleet
of one slot (SPEC), a plan for one recorded incarnation, and the records the tables start
from (a READY node's, a create's still pending).
"""

from __future__ import annotations

from datetime import timedelta

from tpucared.core.model.observed import ObservedNode, ZoneObservation
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.vocab.plan import Plan
from tpucared.gcp.tpu.states import NodeState

from ..core_support import T0, inc, node, run, seen, snapshot, spec

P = NodePhase
C = NodeState
SPEC = spec(size=1)


def plan_for(
    record: IncarnationRecord,
    observations: list[ZoneObservation],
    reported: frozenset[str] = frozenset(),
) -> Plan:
    return run([SPEC], observations, snapshot(record, specs=[SPEC]), reported=reported)


def ready(
    n: ObservedNode, *, since: timedelta = timedelta(minutes=5), **kw: object
) -> IncarnationRecord:
    return seen(inc(1, 0, P.READY, since=T0 - since, **kw), n)  # type: ignore[arg-type]


READY_NODE = node()


def pending(
    phase: NodePhase, age: timedelta = timedelta(minutes=1), **kw: object
) -> IncarnationRecord:
    return inc(1, 0, phase, since=T0 - age, **kw)  # type: ignore[arg-type]
