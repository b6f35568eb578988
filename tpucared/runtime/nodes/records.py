"""The executor's record-only actions: what each writes, one action at a time.

Where it sits: executor.py applies a plan's actions; those that only write records and have
no bulk path (`Tx.open_slots`, `Tx.adopt_many`, `Tx.cas_many`) come here, each inside the
savepoint `Tx.apply_each` gives it. Owns `Outcome`, what became of an action (typed, so the
executor judges it by its kind, never by its words).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tpucared.core.vocab.actions import (
    Action,
    Adopt,
    HoldSlices,
    Notice,
    OpenSlot,
    RecordCloud,
    RecordFleet,
    Transition,
)
from tpucared.store import KEEP, Tx


class OutcomeKind(StrEnum):
    """What became of one action of a plan (executor.py)."""

    DONE = "done"
    # Not tried: a call for its node (or a delete of its name) is in flight, or the tick's
    # budget is spent; the next tick plans it again.
    POSTPONED = "postponed"
    STALE = "stale"  # refused: the records moved on since the plan read them
    SKIPPED = "skipped"  # refused otherwise: the record is gone, or an illegal transition


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    says: str  # for people: the log line's `outcome`

    @property
    def expected(self) -> bool:
        """What a tick meets every day (logged at info); any other refusal is a warning."""
        return self.kind is not OutcomeKind.SKIPPED


DONE = Outcome(OutcomeKind.DONE, "done")


async def record(tx: Tx, action: Action, now: datetime) -> Outcome:
    """Write `action`'s records in `tx`; DONE, or the store's refusal raised."""
    match action:
        case OpenSlot():
            await tx.open_slot(action.fleet, action.slot, now, reason=action.reason)
        case RecordFleet():
            await tx.record_fleet(
                action.fleet, action.spec_hash, action.spec_json, now, reason=action.reason
            )
        case Transition():
            await tx.transition(
                action.incarnation_id,
                action.expected,
                action.new,
                now,
                reason=action.reason,
                end_reason=action.end_reason if action.end_reason is not None else KEEP,
                cloud=action.cloud,
                slot_update=action.slot_update,
                cause=action.cause,
                lost_at=action.lost_at,
            )
        case HoldSlices():
            await tx.update_slot(
                action.fleet, action.slot, now, held_since=action.since,
                reason=action.reason,
            )  # fmt: skip
        case RecordCloud():
            await tx.record_cloud(
                action.incarnation_id,
                action.expected,
                action.cloud,
                now,
                reason=action.reason,
            )
        case Adopt():
            # A node beyond the fleet's size has no slot record yet; its row needs
            # one (nodes -> slots), even though it is adopted only to be deleted.
            await tx.open_slot(action.fleet, action.slot, now, reason=action.reason)
            await tx.adopt(
                action.fleet,
                action.slot,
                action.node_name,
                action.zone,
                action.accelerator_type,
                action.phase,
                action.cloud,
                now,
                queued_resource=action.queued_resource,
                end_reason=action.end_reason,
                reason=action.reason,
                slice_index=action.slice,
                project=action.project,
                api=action.api,
            )
        case Notice():
            await tx.append_event(
                "notice",
                action.reason,
                now,
                fleet=action.fleet,
                node=action.node,
                details={"severity": action.severity.value, "key": action.key},
            )
        case _:
            raise TypeError(f"the executor does not know {action!r}")
    return DONE
