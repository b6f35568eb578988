"""The execution budget's rule: what of a plan still runs once the tick's budget is spent.

The executor (runtime/nodes/executor.py `Executor.execute`) applies a plan in batches and asks
before each batch after the first. Once the budget (the poll interval, by default) has passed,
the rest of the plan is postponed to the next tick, which plans again from what the lists
show, so a burst holds observation up by at most about one poll; but the plan's creates still
run: they are few (the create limits bound them), they are what a fleet's recovery waits for,
and they come last in a plan, so a storm whose deletes and transitions fill every tick's
budget would otherwise starve them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tpucared.core.vocab.actions import Action, CreateNode


@dataclass(frozen=True)
class BudgetCut:
    """The plan's actions not applied yet, once the budget is spent, in plan order."""

    run: tuple[Action, ...]  # applied all the same: the creates
    postponed: tuple[Action, ...]  # left to the next tick


def budget_cut(
    left: Sequence[Action], *, elapsed: float, budget: float, applied_any: bool
) -> BudgetCut | None:
    """None while the execution may go on: within `budget` seconds, or before its first
    batch (a plan always makes some progress, however late its tick). Past it, what of
    `left` still runs and what waits."""
    if not applied_any or elapsed <= budget:
        return None
    return BudgetCut(
        run=tuple(a for a in left if isinstance(a, CreateNode)),
        postponed=tuple(a for a in left if not isinstance(a, CreateNode)),
    )
