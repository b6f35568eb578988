"""The executor: carries out a plan's actions in order, exactly as core/planning/actions.py says.

Each action is its own store transaction (so one stale action never undoes the others) and
every write is the compare-and-set the planner asked for; a write that loses its race
(`StaleWrite`) is skipped with a log line, never forced. For the two actions that call the
cloud, only the intent is written here (CreateNode: a REQUESTED incarnation; DeleteNode:
DELETING and the call counted), before the call; the call itself and its outcome run in the
background (calls.py), so the tick goes on at once. A cloud action for an incarnation that
still has a call in flight is postponed to the next tick (one call per node at a time).

core/planning/executor_contract.py `apply_intent` is the same contract as a pure function; the
runtime tests compare the two. Every action gets one canonical log line: what, why, and how it
ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from tpucared.core.model.records import IncarnationRecord
from tpucared.core.nodes.lifecycle import IllegalTransition
from tpucared.core.planning.actions import (
    Action,
    Adopt,
    CreateNode,
    DeleteNode,
    Notice,
    OpenSlot,
    RecordCloud,
    RecordFleet,
    Severity,
    Transition,
)
from tpucared.core.planning.plan import Plan
from tpucared.runtime.nodes.calls import CloudCalls
from tpucared.store import KEEP, NotFound, StaleWrite, Store

log = structlog.get_logger(__name__)

DONE = "done"
POSTPONED = "postponed: a call for this node is still in flight"
STALE = "skipped: stale"


@dataclass
class Execution:
    """What one plan came to: each action with its outcome ("done", "skipped: ...")."""

    outcomes: list[tuple[Action, str]] = field(default_factory=list)

    @property
    def done(self) -> list[Action]:
        return [a for a, outcome in self.outcomes if outcome == DONE]

    @property
    def skipped(self) -> int:
        return sum(1 for _, outcome in self.outcomes if outcome != DONE)

    def deletes(self) -> list[DeleteNode]:
        return [a for a in self.done if isinstance(a, DeleteNode)]


class Executor:
    def __init__(self, store: Store, calls: CloudCalls) -> None:
        self._store = store
        self._calls = calls

    async def execute(
        self, plan: Plan, live: Mapping[int, IncarnationRecord] | None = None
    ) -> Execution:
        """Apply every action of `plan` in order. `live` (the snapshot's incarnations by id)
        names the fleet and slot in the log lines of actions that only carry an id."""
        result = Execution()
        for action in plan.actions:
            with structlog.contextvars.bound_contextvars(**_context(action, live or {})):
                outcome = await self._apply_logged(action, plan.now)
            result.outcomes.append((action, outcome))
        return result

    async def _apply_logged(self, action: Action, now: datetime) -> str:
        try:
            outcome = await self._apply(action, now)
        except StaleWrite as exc:
            # Expected now and then: a call's outcome or another process wrote first.
            outcome = f"{STALE}: {exc}"
        except NotFound as exc:
            outcome = f"skipped: {exc}"
        except IllegalTransition as exc:
            # A planner bug; skipping keeps every other slot working while it is fixed.
            log.error("the plan asked for an illegal transition", error=str(exc))
            outcome = f"skipped: {exc}"
        if isinstance(action, Notice):
            _log_notice(action)
        elif isinstance(action, CreateNode | DeleteNode) and outcome == DONE:
            # The canonical line comes when the call ends (calls.py); this is its intent.
            log.debug(action.kind, action=action.summary(), reason=action.reason, outcome="intent")
        else:
            expected = outcome == DONE or outcome.startswith((STALE, POSTPONED))
            level = log.info if expected else log.warning
            level(action.kind, action=action.summary(), reason=action.reason, outcome=outcome)
        return outcome

    async def _apply(self, action: Action, now: datetime) -> str:
        match action:
            case CreateNode():
                async with self._store.write() as tx:
                    inc = await tx.request_node(
                        action.fleet,
                        action.slot,
                        action.node_name,
                        action.zone,
                        action.accelerator_type,
                        now,
                        queued_resource=action.queued_resource,
                        reason=action.reason,
                        project=action.project,
                    )
                self._calls.start_create(action, inc)
            case DeleteNode():
                if self._calls.busy(action.incarnation_id):
                    return POSTPONED
                async with self._store.write() as tx:
                    inc = await tx.begin_delete(
                        action.incarnation_id,
                        action.expected,
                        now,
                        end_reason=action.end_reason,
                        reason=action.reason,
                    )
                self._calls.start_delete(action, inc)
            case _:
                await self._record(action, now)
        return DONE

    async def _record(self, action: Action, now: datetime) -> None:
        """The actions that only write records."""
        async with self._store.write() as tx:
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
                    )
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
                        project=action.project,
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


def _context(action: Action, live: Mapping[int, IncarnationRecord]) -> dict[str, object]:
    """fleet / slot / node of an action, for structlog's context."""
    out: dict[str, object] = {}
    inc_id = getattr(action, "incarnation_id", None)
    inc = live.get(inc_id) if isinstance(inc_id, int) else None
    fleet = getattr(action, "fleet", None) or (inc.fleet if inc else None)
    slot = getattr(action, "slot", None)
    if slot is None and inc is not None:
        slot = inc.slot
    node = getattr(action, "node_name", None) or getattr(action, "node", None)
    if fleet is not None:
        out["fleet"] = fleet
    if slot is not None:
        out["slot"] = slot
    if node is not None:
        out["node"] = node
    if inc_id is not None:
        out["incarnation"] = inc_id
    return out


_SEVERITY_LEVEL = {Severity.INFO: "info", Severity.WARNING: "warning", Severity.ERROR: "error"}


def _log_notice(notice: Notice) -> None:
    getattr(log, _SEVERITY_LEVEL[notice.severity])("notice", key=notice.key, message=notice.reason)
