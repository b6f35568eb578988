"""Each slot's losses by cause, for `tpucared status` (store/reads.py `status`; issue 41 item 4).

Two grouped reads: the slot's node incarnations by `loss_cause` (every cause but `crash`), and
its workload attempts ended `failed` or `hung` (counted as `crash`: a node replaced after a
crash is the same loss). The same rule as `/metrics` `tpucared_losses_total`
(inspect/lifecycle.py), over what the database keeps rather than since the daemon started.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from sqlalchemy import func, select

from tpucared.core.model.causes import CAUSES, LossCause
from tpucared.core.model.records import AttemptOutcome
from tpucared.store.models import NodeRow, WorkloadAttemptRow

SlotKey = tuple[str, int]

NODE_LOSSES: Final = (
    select(NodeRow.fleet, NodeRow.slot, NodeRow.loss_cause, func.count().label("n"))
    .where(NodeRow.loss_cause.is_not(None), NodeRow.loss_cause != LossCause.CRASH)
    .group_by(NodeRow.fleet, NodeRow.slot, NodeRow.loss_cause)
)
CRASHES: Final = (
    select(WorkloadAttemptRow.fleet, WorkloadAttemptRow.slot, func.count().label("n"))
    .where(WorkloadAttemptRow.outcome.in_([AttemptOutcome.FAILED, AttemptOutcome.HUNG]))
    .group_by(WorkloadAttemptRow.fleet, WorkloadAttemptRow.slot)
)


def by_slot(
    nodes: Iterable[Mapping[str, Any]], crashes: Iterable[Mapping[str, Any]]
) -> dict[SlotKey, dict[str, int]]:
    """The rows of NODE_LOSSES and CRASHES as {(fleet, slot): {cause: count}}, causes in
    the vocabulary's order (core/model/causes.py), none with a zero count."""
    found: dict[SlotKey, dict[str, int]] = {}
    for row in nodes:
        cause = LossCause(row["loss_cause"])
        found.setdefault((row["fleet"], row["slot"]), {})[cause.value] = int(row["n"])
    for row in crashes:
        found.setdefault((row["fleet"], row["slot"]), {})[LossCause.CRASH.value] = int(row["n"])
    order = {c.value: i for i, c in enumerate(CAUSES)}
    return {k: dict(sorted(v.items(), key=lambda kv: order[kv[0]])) for k, v in found.items()}
