"""Which slots are in a stockout: the one rule `status` and the stockout news both read.

A slot is waiting for capacity when its creates meet a stockout (the last one ended CAPACITY
after at least one failure), the daemon keeps retrying it (the slot is not done, its fleet
not down) and no node of it serves past its create. A retry in flight (its node REQUESTED or
CREATING) is part of the same wait: `status` reads "waiting for capacity" throughout a hunt,
not that and "requested" by turns every few seconds, and the stockout news
(runtime/notifications.py, core/notify/news.py) keeps one streak, and so one subject, until
a node serves (a success resets `create_failures`), instead of telling each hunting cycle
again. `inspect/status.py` asks `in_stockout` of one slot; the notifier asks
`slots_in_stockout` of a tick's snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tpucared.core.model.lifecycle import LIVE_PHASES, PENDING_PHASES
from tpucared.core.model.records import CreateAttemptRecord, IncarnationRecord, SlotRecord
from tpucared.core.nodes.create_backoff import waiting_for_capacity
from tpucared.core.vocab.snapshot import PlannerSnapshot, SlotKey

# Phases in which a node serves its slot past its create: the stockout is over.
_PAST_CREATE = LIVE_PHASES - PENDING_PHASES


class CreateHistory(PlannerSnapshot, Protocol):
    """A snapshot that also knows each slot's newest create call (the store's `Snapshot`)."""

    @property
    def last_creates(self) -> Mapping[SlotKey, CreateAttemptRecord]: ...


def in_stockout(
    slot: SlotRecord,
    last_create: CreateAttemptRecord | None,
    node: IncarnationRecord | None,
    *,
    down: bool,
) -> bool:
    """Whether `slot` waits for capacity (the module docstring). `node` is its newest
    incarnation, live or not (a multislice slot's slice 0 stands for it), `last_create` its
    newest create call, `down` whether its fleet is down (or gone)."""
    return waiting_for_capacity(
        slot.create_failures,
        None if last_create is None else last_create.outcome,
        live=node is not None and node.phase in _PAST_CREATE,
        done=slot.done,
        down=down,
    )


def slots_in_stockout(snapshot: CreateHistory) -> list[SlotKey]:
    """The slots of `snapshot` in a stockout, in its order; a slot whose fleet has no record
    counts as down."""
    out: list[SlotKey] = []
    for key, slot in snapshot.slots.items():
        fleet = snapshot.fleets.get(slot.fleet)
        node = snapshot.nodes.get((*key, 0))
        down = fleet is None or fleet.down
        if in_stockout(slot, snapshot.last_creates.get(key), node, down=down):
            out.append(key)
    return out
