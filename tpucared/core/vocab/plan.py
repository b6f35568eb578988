"""The planner's output: ordered actions, informational holds, and the standing notices.

`Plan.actions` is what the executor carries out, in order (see core/vocab/actions.py for the
contract). `Plan.holds` explains slots that want a node but get no create this tick
(backoff, create limits, a zone that failed to list, a name someone else holds): they are
for people (`tpucared plan`, /v1/status) and are never executed. `Plan.standing` is the set
of notice keys whose condition holds at this tick; the runtime passes it to the next
`plan()` as `reported`, so each condition is reported once. `Plan.without_notices_outside` is
the narrowing a run over some fleets only applies (`tpucared down`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from tpucared.core.vocab.actions import Action, Notice

A = TypeVar("A", bound=Action)


@dataclass(frozen=True, kw_only=True)
class Hold:
    fleet: str
    slot: int
    node_name: str
    reason: str
    until: datetime | None = None  # when the hold lifts by itself, if known
    # It waits for a delete in flight to end (core/nodes/slots.py `delete_in_flight`): the
    # runtime wakes the loop when one does.
    on_delete: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "fleet": self.fleet,
            "slot": self.slot,
            "node_name": self.node_name,
            "reason": self.reason,
            "until": self.until.isoformat() if self.until else None,
        }


@dataclass(frozen=True)
class Plan:
    now: datetime
    actions: tuple[Action, ...] = ()
    holds: tuple[Hold, ...] = ()
    standing: frozenset[str] = frozenset()

    def __iter__(self) -> Iterator[Action]:
        return iter(self.actions)

    def __len__(self) -> int:
        return len(self.actions)

    def of(self, kind: type[A]) -> tuple[A, ...]:
        return tuple(a for a in self.actions if isinstance(a, kind))

    def without_notices_outside(self, fleets: Collection[str]) -> Plan:
        """This plan without the notices about fleets other than `fleets` (a run over some
        fleets only leaves the others out, so they read as unmanaged there alone). Every
        other action, and every notice naming no fleet, is kept."""
        kept = tuple(
            a
            for a in self.actions
            if not (isinstance(a, Notice) and a.fleet and a.fleet not in fleets)
        )
        return replace(self, actions=kept)

    def render(self) -> str:
        """One line per action (`kind  what: reason`), then one per hold."""
        lines = [f"{a.kind:<12} {a.summary()}: {a.reason}" for a in self.actions]
        lines += [f"{'hold':<12} {h.node_name}: {h.reason}" for h in self.holds]
        return "\n".join(lines) if lines else "nothing to do"

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now.isoformat(),
            "actions": [a.to_dict() for a in self.actions],
            "holds": [h.to_dict() for h in self.holds],
            "standing": sorted(self.standing),
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)
