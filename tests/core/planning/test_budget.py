"""The execution budget's rule (core/planning/budget.py `budget_cut`): the first batch always
runs; past the budget everything waits for the next tick but the creates, in plan order."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import CapacityKind, Provisioning
from tpucared.core.planning.budget import budget_cut
from tpucared.core.vocab.actions import Action, CreateNode, DeleteNode, Transition

T0 = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
P = NodePhase


def create(slot: int) -> CreateNode:
    return CreateNode(
        fleet="f", slot=slot, node_name=f"f-{slot}", zone="z", accelerator_type="v4-8",
        extra={}, capacity=CapacityKind.SPOT, provisioning=Provisioning.DIRECT, labels={},
        queued_resource=None, attempt=1, reason="slot empty",
    )  # fmt: skip


def delete(id: int) -> DeleteNode:
    return DeleteNode(
        incarnation_id=id, fleet="f", slot=id, node_name=f"f-{id}", zone="z", expected=P.DEAD,
        queued_resource=None, reason="preempted",
    )  # fmt: skip


def dead(id: int) -> Transition:
    return Transition(
        incarnation_id=id, node_name=f"f-{id}", expected=P.READY, new=P.DEAD, reason="preempted"
    )


PLAN: list[Action] = [dead(1), delete(1), dead(2), create(1), delete(2), create(2)]


@pytest.mark.parametrize(
    ("elapsed", "applied_any"),
    [(0.0, False), (99.0, False), (0.5, True), (1.0, True)],  # at the budget: still within
)
def test_within_the_budget_or_before_the_first_batch_it_goes_on(
    elapsed: float, applied_any: bool
) -> None:
    assert budget_cut(PLAN, elapsed=elapsed, budget=1.0, applied_any=applied_any) is None


def test_past_the_budget_only_the_creates_still_run_in_plan_order() -> None:
    cut = budget_cut(PLAN, elapsed=1.01, budget=1.0, applied_any=True)
    assert cut is not None
    assert cut.run == (create(1), create(2))
    assert cut.postponed == (dead(1), delete(1), dead(2), delete(2))


def test_past_the_budget_without_creates_everything_waits() -> None:
    cut = budget_cut(PLAN[:3], elapsed=5.0, budget=1.0, applied_any=True)
    assert cut is not None
    assert (cut.run, cut.postponed) == ((), tuple(PLAN[:3]))
