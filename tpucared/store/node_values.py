"""The columns each write of a node incarnation changes: pure functions of the row as it stands.

Where it sits: `write_nodes` (one write, a compare-and-set each), `write_many` (a run of them
in a few statements) and `write_adopt` compute what they write here, so the three cannot
disagree on what entering a phase stamps.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from tpucared.core.model.causes import LossCause
from tpucared.core.model.lifecycle import check_transition, is_terminal
from tpucared.core.model.records import IncarnationRecord, NodePhase, WorkerRecord
from tpucared.core.vocab.actions import CloudFacts, SlotUpdate
from tpucared.store.write_base import Keep, given

# Column recording when an incarnation entered each phase.
PHASE_AT: Final = {
    NodePhase.REQUESTED: "requested_at",
    NodePhase.CREATING: "creating_at",
    NodePhase.READY: "ready_at",
    NodePhase.DEAD: "dead_at",
    NodePhase.DELETING: "deleting_at",
    NodePhase.DELETED: "deleted_at",
    NodePhase.FAILED: "failed_at",
}


def cloud_values(cloud: CloudFacts) -> dict[str, object]:
    return {
        "cloud_state": cloud.cloud_state,
        "cloud_state_since": cloud.cloud_state_since,
        "health": cloud.health,
        "unhealthy_since": cloud.unhealthy_since,
        "cloud_id": cloud.cloud_id,
        "create_time": cloud.create_time,
        "run_ends_at": cloud.run_ends_at,
        "maintenance": cloud.maintenance,
    }


def same_cloud(
    current: IncarnationRecord, workers: Sequence[WorkerRecord], cloud: CloudFacts
) -> bool:
    """True when recording `cloud` (RecordCloud) would change nothing: the facts as recorded,
    and the workers too when it carries endpoints. Such a record writes nothing, no event."""
    same_facts = all(getattr(current, k) == v for k, v in cloud_values(cloud).items())
    return same_facts and (
        cloud.endpoints is None
        or sorted((w.index, w.internal_ip, w.external_ip) for w in workers)
        == sorted((ep.index, ep.internal_ip, ep.external_ip) for ep in cloud.endpoints)
    )


def entering(current: IncarnationRecord, new: NodePhase, now: datetime) -> dict[str, object]:
    """Columns stamped when `current` enters phase `new`."""
    values: dict[str, object] = {"phase": new, "phase_since": now, PHASE_AT[new]: now}
    if new is NodePhase.DELETING and current.dead_at is None:
        values["dead_at"] = now  # its useful life ended when we decided to delete it
    if is_terminal(new):
        values["operation"] = None  # nothing is in flight for a finished incarnation
    return values


def transition_values(
    current: IncarnationRecord,
    new: NodePhase,
    now: datetime,
    end_reason: str | Keep | None,
    operation: str | Keep | None,
    cloud: CloudFacts | None,
    cause: LossCause | None = None,
    lost_at: datetime | None = None,
) -> dict[str, object]:
    """The columns `transition` writes (see its docstring)."""
    values = entering(current, new, now)
    values["error"] = None
    values.update(given(end_reason=end_reason, operation=operation))
    if cloud is not None:
        values.update(cloud_values(cloud))
    if cause is not None:
        values["loss_cause"] = cause
    if lost_at is not None:
        values["cloud_lost_at"] = lost_at
    return values


def deleting_values(
    current: IncarnationRecord,
    expected: NodePhase,
    now: datetime,
    end_reason: str | None,
    cause: LossCause | None = None,
) -> dict[str, object]:
    """The columns `begin_delete` writes, but for the call count (`delete_calls + 1`)."""
    values: dict[str, object] = {"last_delete_at": now, "error": None}
    if expected is not NodePhase.DELETING:
        check_transition(expected, NodePhase.DELETING)
        values.update(entering(current, NodePhase.DELETING, now))
    if end_reason is not None:
        values["end_reason"] = end_reason
    if cause is not None:
        values["loss_cause"] = cause
    return values


def cause_details(current: IncarnationRecord, cause: LossCause | None) -> dict[str, object]:
    """`{"cause": ...}` for the event of a write that records a loss's cause; empty when it
    sets none, or the one already recorded (each loss's cause is in exactly one event, which
    the metrics count: docs/metrics.md `tpucared_losses_total`)."""
    if cause is None or cause == current.loss_cause:
        return {}
    return {"cause": cause.value}


def lost_details(lost_at: datetime | None) -> dict[str, object]:
    """`{"lost_at": ...}` for the event of a write that records the cloud's own time of a
    loss (ISO 8601, UTC); empty when it records none."""
    return {} if lost_at is None else {"lost_at": lost_at.isoformat()}


def check_slot_update(current: IncarnationRecord, slot_update: SlotUpdate | None) -> None:
    if slot_update is not None and (slot_update.fleet, slot_update.slot) != (
        current.fleet,
        current.slot,
    ):
        raise ValueError(
            f"slot update for {slot_update.fleet}/{slot_update.slot} "
            f"on an incarnation of {current.fleet}/{current.slot}"
        )
