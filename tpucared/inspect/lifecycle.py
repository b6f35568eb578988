"""Facts for the metrics, read from the event log: preemptions, latencies, workload outcomes.

The store appends an event for every phase change and workload outcome, in commit order,
with the details needed here (`from`/`to`, `delete_calls`, the slot update and its
`add_preemptions`). Reading those events, rather than asking the runtime to report each
fact, keeps the metrics exact whichever code path wrote the change, and costs the runtime
one call per tick (`DaemonMetrics.refresh`).

Definitions (also in docs/metrics.md):
- preemption: an event whose slot update adds preemptions (`budget.node_died`: preempted,
  terminated, vanished, unhealthy, stuck, deleted outside tpucared), counted per fleet.
- flex-start run end: a `node.run_ended` event (core/nodes/flex.py), counted per fleet; it
  is no preemption and no loss the recovery latency waits on.
- loss by cause (core/model/causes.py): a node event whose details say `cause` (the store puts
  it in exactly one event per loss), counted per fleet and cause; `crash` is counted from the
  workload attempts ended `failed` or `hung` instead (a node replaced after a crash is the
  same loss, not a second one).
- dead-to-delete: from `node.dead` (the tick that found the node dead) to the first delete
  call recorded for it (`node.deleting` with `delete_calls == 1`). Nodes that needed no
  delete (vanished) are not measured.
- recovery: from the loss of a serving node (a preemption as above, or `node.dead` from
  READY) to the next `node.ready` of the same slot. A slot that is done or whose fleet goes
  down stops waiting. Losses from before the daemon started are not known to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome, EventRecord
from tpucared.core.nodes.flex import RUN_ENDED

SlotKey = tuple[str, int]
_OUTCOMES = frozenset(o.value for o in AttemptOutcome)
# The causes counted from node events: all but crash, which the attempts count.
_NODE_CAUSES = frozenset(c.value for c in LossCause if c is not LossCause.CRASH)


class LatencyKind(StrEnum):
    DEAD_TO_DELETE = "dead_to_delete"
    RECOVERY = "recovery"


@dataclass(frozen=True)
class Preempted:
    fleet: str
    count: int


@dataclass(frozen=True)
class RunEnded:
    """A flex-start node's run ended (`node.run_ended`): neither a preemption nor a failure."""

    fleet: str


@dataclass(frozen=True)
class Lost:
    """A loss with its cause (a LossCause value): a node's, or a crashed workload attempt's."""

    fleet: str
    cause: str


@dataclass(frozen=True)
class Latency:
    kind: LatencyKind
    fleet: str
    seconds: float


@dataclass(frozen=True)
class AttemptEnded:
    fleet: str
    outcome: str  # an AttemptOutcome value


Observation = Preempted | Latency | AttemptEnded | RunEnded | Lost
_CRASHED = frozenset({AttemptOutcome.FAILED.value, AttemptOutcome.HUNG.value})


class LifecycleTracker:
    """Feed it every event once, in id order; it remembers what the latencies wait for."""

    def __init__(self) -> None:
        self._dead_at: dict[SlotKey, datetime] = {}  # dead, no delete call yet
        self._lost_at: dict[SlotKey, datetime] = {}  # lost a serving node, not READY again

    def feed(self, events: Iterable[EventRecord]) -> list[Observation]:
        found: list[Observation] = []
        for e in events:
            found += self._one(e)
        return found

    def _one(self, e: EventRecord) -> list[Observation]:
        if e.fleet is None:
            return []
        if e.kind == "fleet.down":
            for key in [k for k in self._lost_at if k[0] == e.fleet]:
                del self._lost_at[key]
            return []
        if e.kind.startswith("attempt.") and e.kind[len("attempt.") :] in _OUTCOMES:
            outcome = e.kind[len("attempt.") :]
            crashed = [Lost(e.fleet, LossCause.CRASH.value)] if outcome in _CRASHED else []
            return [AttemptEnded(e.fleet, outcome), *crashed]
        if e.kind == "node.run_ended":
            return [RunEnded(e.fleet)]
        cause = e.details.get("cause") if e.kind.startswith("node.") else None
        lost: list[Observation] = [Lost(e.fleet, str(cause))] if cause in _NODE_CAUSES else []
        if e.slot is None:
            return lost
        return lost + self._slot_event(e, (e.fleet, e.slot))

    def _slot_event(self, e: EventRecord, key: SlotKey) -> list[Observation]:
        found: list[Observation] = []
        added = _added_preemptions(e.details)
        if added:
            found.append(Preempted(key[0], added))
        # A flex-start run's end is no loss to recover from: the slot waits for capacity anew.
        serving_lost = added > 0 or (
            e.kind == "node.dead"
            and e.details.get("from") == "ready"
            and e.details.get("end_reason") != RUN_ENDED
        )
        if serving_lost:
            # The first loss counts: if the replacement dies too, the slot is still down.
            self._lost_at.setdefault(key, e.at)
        if e.kind == "node.dead":
            self._dead_at[key] = e.at
        elif e.kind == "node.deleting" and e.details.get("delete_calls") == 1:
            dead_at = self._dead_at.pop(key, None)
            if dead_at is not None:
                found.append(Latency(LatencyKind.DEAD_TO_DELETE, key[0], _seconds(dead_at, e.at)))
        elif e.kind in ("node.deleted", "node.failed"):
            self._dead_at.pop(key, None)  # ended without a delete call of ours
        elif e.kind == "node.ready":
            self._dead_at.pop(key, None)
            lost_at = self._lost_at.pop(key, None)
            if lost_at is not None:
                found.append(Latency(LatencyKind.RECOVERY, key[0], _seconds(lost_at, e.at)))
        elif e.kind == "slot.done":
            self._lost_at.pop(key, None)  # no replacement is coming, by design
        return found


def _added_preemptions(details: Mapping[str, object]) -> int:
    update = details.get("slot_update")
    if not isinstance(update, Mapping):
        return 0
    added = update.get("add_preemptions")
    return added if isinstance(added, int) and added > 0 else 0


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())
