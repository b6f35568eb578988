"""What the store remembers, as the planner needs it: one immutable value per tick.

The planner asks for the `PlannerSnapshot` protocol only: the store's own
`tpucared.store.Snapshot` (one consistent read transaction) satisfies it structurally, so
core never imports the store. `PlainSnapshot` here is a plain implementation with the same
fields, for tests and tools. `nodes` holds only incarnations in a LIVE phase, at most one
per slot and slice (the store's unique index guarantees it; the planner relies on it), keyed by
`NodeKey` (fleet, slot, slice); a single-slice slot's node is slice 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.records import FleetRecord, IncarnationRecord, SlotRecord

SlotKey = tuple[str, int]  # (fleet name, slot index)
NodeKey = tuple[str, int, int]  # (fleet name, slot index, slice index)


class PlannerSnapshot(Protocol):
    @property
    def fleets(self) -> Mapping[str, FleetRecord]: ...

    @property
    def slots(self) -> Mapping[SlotKey, SlotRecord]: ...

    @property
    def nodes(self) -> Mapping[NodeKey, IncarnationRecord]: ...


@dataclass(frozen=True)
class PlainSnapshot:
    fleets: Mapping[str, FleetRecord] = field(default_factory=dict)
    slots: Mapping[SlotKey, SlotRecord] = field(default_factory=dict)
    nodes: Mapping[NodeKey, IncarnationRecord] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        fleets: Iterable[FleetRecord] = (),
        slots: Iterable[SlotRecord] = (),
        incarnations: Iterable[IncarnationRecord] = (),
    ) -> PlainSnapshot:
        """Key plain records the way the store does; terminal incarnations are dropped and a
        second live incarnation of one slot's slice is a ValueError (the store cannot hold one)."""
        nodes: dict[NodeKey, IncarnationRecord] = {}
        for inc in incarnations:
            if inc.phase not in LIVE_PHASES:
                continue
            key = inc.key
            if key in nodes:
                raise ValueError(f"two live incarnations of {inc.fleet}/{inc.slot}/{inc.slice}")
            nodes[key] = inc
        return cls(
            fleets={f.name: f for f in fleets},
            slots={(s.fleet, s.index): s for s in slots},
            nodes=nodes,
        )
