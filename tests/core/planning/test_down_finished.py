"""When `tpucared down` is done (core/planning/down.py): no action, no live node, every list."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import ErrorKind
from tpucared.core.planning.down import down_finished
from tpucared.core.vocab.actions import Action, DeleteNode, Notice, Severity
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.snapshot import PlainSnapshot

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ZONES = {("p", "z1"), ("p", "z2")}


def node(fleet: str, phase: NodePhase = NodePhase.DELETING) -> IncarnationRecord:
    return IncarnationRecord(
        id=1,
        fleet=fleet,
        slot=0,
        node_name=f"{fleet}-0",
        zone="z1",
        accelerator_type="v5litepod-8",
        phase=phase,
        phase_since=NOW,
        requested_at=NOW,
    )


def listed(zone: str, project: str = "p", *, ok: bool = True) -> ZoneObservation:
    error = None if ok else ErrorKind.TRANSIENT
    return ZoneObservation(zone, NOW, error=error, project=project)


NOTICE = Notice(reason="still there", key="k", severity=Severity.WARNING, fleet="down")
DELETE = DeleteNode(
    reason="fleet down",
    incarnation_id=1,
    fleet="down",
    slot=0,
    node_name="down-0",
    zone="z1",
    expected=NodePhase.READY,
    queued_resource=None,
)
ALL_LISTED = (listed("z1"), listed("z2"))


@pytest.mark.parametrize(
    ("actions", "nodes", "observations", "expected"),
    [
        ((), (), ALL_LISTED, True),
        ((NOTICE,), (), ALL_LISTED, True),  # notices are no work left
        ((DELETE,), (), ALL_LISTED, False),  # a delete still to do
        ((), (node("down"),), ALL_LISTED, False),  # a live node of the fleet
        ((), (node("down", NodePhase.DELETED),), ALL_LISTED, True),  # ended: not in a snapshot
        ((), (node("other", NodePhase.READY),), ALL_LISTED, True),  # another fleet's
        ((), (), (listed("z1"), listed("z2", ok=False)), False),  # a failed list hides nodes
        ((), (), (listed("z1"), listed("z3", ok=False)), True),  # not a zone of the fleet
        ((), (), (listed("z1"), listed("z2", "q", ok=False)), True),  # nor another project's
    ],
)
def test_down_finished(
    actions: tuple[Action, ...],
    nodes: tuple[IncarnationRecord, ...],
    observations: tuple[ZoneObservation, ...],
    expected: bool,
) -> None:
    plan = Plan(NOW, actions)
    snapshot = PlainSnapshot.of(incarnations=nodes)
    assert down_finished(plan, snapshot, observations, {"down"}, ZONES) is expected
