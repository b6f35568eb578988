"""The executor: carries out a plan's actions in order, exactly as core/vocab/actions.py says.

Every write is the compare-and-set the planner asked for; a write that loses its race
(`StaleWrite`) is skipped with a log line, never forced. For the two actions that call the
cloud, only the intent is written here (CreateNode: a REQUESTED incarnation; DeleteNode:
DELETING and the call counted); the call itself starts once its intent is committed, and it
and its outcome run in the background (calls.py), so the tick goes on at once. A cloud
action for an incarnation that still has a call in flight, or whose name a delete in flight
(or one written earlier in this plan) may still reach, is postponed to the next tick (one
call per node at a time).

Actions are applied in batches of up to `RECORD_BATCH` (committed early once open for
`BATCH_S`, so the lease keeper's renewal never waits long behind one), in the plan's order: one
transaction each, every action in a savepoint of its own, so a stale action is undone alone
and the others still commit; the calls of a batch's intents start after its commit. Why:
each commit syncs the WAL (store/engine.py). Adopting 10,000 nodes after a lost database is
20,000 record actions: one sync each took ~300 s; and a preemption storm's 100 deletes a
tick, each intent in its own transaction behind the calls' outcome writes, held a tick for
30 s (docs/benchmarks.md). A crash loses at most the batch in flight, whose actions the next
plan asks for again, exactly as after a crash between two single-action transactions.

The execution is bounded: once its budget has passed (the daemon gives it the poll interval,
`EXECUTE_BUDGET_S` by default), the batches left are not started (their actions are
"postponed: the tick's budget"), but for the plan's creates: the next tick plans again from
what the lists show, so a burst holds observation up by at most about one poll, and the
creates a fleet's recovery waits for are never starved by it.

core/planning/executor_contract.py `apply_intent` is the same contract as a pure function; the
runtime tests compare the two. Every action gets one canonical log line: what, why, and how it
ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from tpucared.core.model.lifecycle import IllegalTransition
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.nodes.create_rate import CreatesSent
from tpucared.core.nodes.slots import DeletesInFlight
from tpucared.core.vocab.actions import (
    Action,
    Adopt,
    CreateNode,
    DeleteNode,
    HoldSlices,
    Notice,
    OpenSlot,
    RecordCloud,
    RecordFleet,
    Severity,
    Transition,
)
from tpucared.core.vocab.plan import Plan
from tpucared.runtime.nodes.calls import CloudCalls
from tpucared.store import KEEP, NotFound, StaleWrite, Store, Tx

log = structlog.get_logger(__name__)

# Record-only actions per transaction: large enough that the sync per commit no longer
# dominates, small enough that another process's writer (`tpucared down`) waits well under
# its busy_timeout for one batch.
RECORD_BATCH = 256
# Seconds a tick's execution may run before the batches left wait for the next tick.
EXECUTE_BUDGET_S = 1.0
# Seconds one batch's transaction may stay open before it commits and the next one starts: the
# lease keeper's renewal (every third of the lease) waits behind an open write transaction,
# so none may last long, however loaded the machine (a CI run saw a 256-intent batch outlast
# a 3 s lease).
BATCH_S = 0.5

DONE = "done"
POSTPONED = "postponed: a call for this node (or a delete of its name) is still in flight"
OVER_BUDGET = "postponed: the tick's budget is spent"
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

    def deleted(self) -> set[int]:
        """The incarnations this plan moved to DELETED."""
        return {
            a.incarnation_id
            for a in self.done
            if isinstance(a, Transition) and a.new is NodePhase.DELETED
        }


class Executor:
    def __init__(
        self,
        store: Store,
        calls: CloudCalls,
        *,
        budget: float = EXECUTE_BUDGET_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._calls = calls
        self._budget = budget
        self._monotonic = monotonic

    def deletes_in_flight(self) -> DeletesInFlight:
        """What the planner must know of the calls in flight (CloudCalls)."""
        return self._calls.deletes_in_flight()

    def creates_sent(self) -> CreatesSent:
        """When the creates of the last minute were sent (CloudCalls), for the create rate."""
        return self._calls.creates_sent()

    def wake_when_deletes_end(self, plan: Plan) -> None:
        """If `plan` holds something for a delete in flight, the loop wakes when one ends."""
        if any(h.on_delete for h in plan.holds):
            self._calls.wake_when_deletes_end()

    async def execute(
        self, plan: Plan, live: Mapping[int, IncarnationRecord] | None = None
    ) -> Execution:
        """Apply every action of `plan` in order. `live` (the snapshot's incarnations by id)
        names the fleet and slot in the log lines of actions that only carry an id."""
        result = Execution()
        actions = list(plan.actions)
        started = self._monotonic()
        at = 0
        while at < len(actions):
            if at and self._monotonic() - started > self._budget:
                # The creates still run: few (the create limits bound them), they are what a
                # fleet's recovery waits for, and they come last in a plan, so a storm whose
                # deletes and transitions fill every tick's budget would starve them.
                left = actions[at:]
                creates: list[Action] = [a for a in left if isinstance(a, CreateNode)]
                kept = {id(a) for a in creates}
                result.outcomes += [(a, OVER_BUDGET) for a in left if id(a) not in kept]
                log.info(
                    "execution.over_budget", budget_s=self._budget, left=len(left) - len(creates)
                )
                while creates:
                    outcomes = await self._record_batch(creates, plan.now, live or {})
                    result.outcomes += outcomes
                    creates = creates[len(outcomes) :]
                break
            batch = actions[at : at + RECORD_BATCH]
            outcomes = await self._record_batch(batch, plan.now, live or {})
            result.outcomes += outcomes
            at += len(outcomes)
        return result

    async def _record_batch(
        self, batch: list[Action], now: datetime, live: Mapping[int, IncarnationRecord]
    ) -> list[tuple[Action, str]]:
        """One transaction for the batch, one savepoint per action, or a few statements for a
        run of OpenSlot and Adopt actions (a fleet found again: `Tx.adopt_many`); logged in
        the plan's order once committed. It commits early, after `BATCH_S`: the outcomes are
        those of the batch's first actions, the caller goes on with the rest."""
        order = {id(a): i for i, a in enumerate(batch)}
        outcomes: list[tuple[Action, str]] = []
        intents = _Intents(self._calls)
        began = self._monotonic()
        try:
            async with self._store.write() as tx:
                for run in _runs(batch):
                    if outcomes and self._monotonic() - began > BATCH_S:
                        break
                    if len(run) > 1 and all(_in_bulk(a) for a in run):
                        outcomes += await self._record_run(tx, run, now)
                        continue
                    for action in run:
                        if outcomes and self._monotonic() - began > BATCH_S:
                            break
                        with structlog.contextvars.bound_contextvars(**_context(action, live)):
                            if isinstance(action, CreateNode | DeleteNode):
                                done = await self._outcome(self._intent(tx, action, now, intents))
                            else:
                                done = await self._outcome(self._record(tx, action, now))
                        outcomes.append((action, done))
        except BaseException:
            intents.abandon()  # nothing of the batch was written: no call goes out
            raise
        intents.start()  # committed: the calls go out
        outcomes.sort(key=lambda pair: order[id(pair[0])])
        for action, outcome in outcomes:
            with structlog.contextvars.bound_contextvars(**_context(action, live)):
                self._log(action, outcome)
        return outcomes

    async def _record_run(
        self, tx: Tx, run: list[Action], now: datetime
    ) -> list[tuple[Action, str]]:
        """A run of OpenSlot and Adopt actions: the slots first (an Adopt opens its own slot
        anyway, and opening one twice is a no-op), then the adoptions, each refused alone
        as `adopt` would refuse it. Its events come slots first, then nodes."""
        slots = [a for a in run if isinstance(a, OpenSlot)]
        adopts = [a for a in run if isinstance(a, Adopt)]
        outcomes: list[tuple[Action, str]] = []
        if slots:
            await tx.open_slots(slots, now)
            outcomes += [(a, DONE) for a in slots]
        if adopts:
            refusals = await tx.adopt_many(adopts, now)
            for action, refusal in zip(adopts, refusals, strict=True):
                outcomes.append((action, DONE if refusal is None else _refused(refusal)))
        return outcomes

    async def _outcome(self, applying: Coroutine[Any, Any, str]) -> str:
        try:
            return await applying
        except StaleWrite as exc:
            # Expected now and then: a call's outcome or another process wrote first.
            return f"{STALE}: {exc}"
        except NotFound as exc:
            return f"skipped: {exc}"
        except IllegalTransition as exc:
            # A planner bug; skipping keeps every other slot working while it is fixed.
            log.error("plan.illegal_transition", error=str(exc))
            return f"skipped: {exc}"

    def _log(self, action: Action, outcome: str) -> None:
        if isinstance(action, Notice):
            _log_notice(action)
        elif isinstance(action, CreateNode | DeleteNode) and outcome == DONE:
            # The canonical line comes when the call ends (calls.py); this is its intent.
            log.debug(
                action.log_event, action=action.summary(), reason=action.reason, outcome="intent"
            )
        else:
            expected = outcome == DONE or outcome.startswith((STALE, POSTPONED))
            level = log.info if expected else log.warning
            level(action.log_event, action=action.summary(), reason=action.reason, outcome=outcome)

    async def _intent(
        self, tx: Tx, action: CreateNode | DeleteNode, now: datetime, intents: _Intents
    ) -> str:
        """A cloud action's intent, in its own savepoint of the batch's `tx`; its call is
        started by `intents` once the batch is committed."""
        match action:
            case CreateNode():
                if self._calls.name_busy(action):
                    return POSTPONED
                async with tx.savepoint():
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
                        slice_index=action.slice,
                        api=action.api,
                    )
                intents.created(action, inc)
            case DeleteNode():
                if self._calls.busy(action.incarnation_id) or self._calls.name_busy(action):
                    return POSTPONED
                self._calls.reserve_delete(action)  # a later action of the plan waits for it
                try:
                    async with tx.savepoint():
                        inc = await tx.begin_delete(
                            action.incarnation_id,
                            action.expected,
                            now,
                            end_reason=action.end_reason,
                            reason=action.reason,
                        )
                except BaseException:
                    self._calls.unreserve_delete(action)
                    raise
                intents.deleting(action, inc)
        return DONE

    async def _record(self, tx: Tx, action: Action, now: datetime) -> str:
        """An action that only writes records, in its own savepoint of the batch's `tx`."""
        async with tx.savepoint():
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


class _Intents:
    """The cloud calls whose intents a batch wrote, started only once it commits."""

    def __init__(self, calls: CloudCalls) -> None:
        self._calls = calls
        self._creates: list[tuple[CreateNode, IncarnationRecord]] = []
        self._deletes: list[tuple[DeleteNode, IncarnationRecord]] = []

    def created(self, action: CreateNode, inc: IncarnationRecord) -> None:
        self._creates.append((action, inc))

    def deleting(self, action: DeleteNode, inc: IncarnationRecord) -> None:
        self._deletes.append((action, inc))

    def start(self) -> None:
        for delete, inc in self._deletes:
            self._calls.start_delete(delete, inc)
        for create, inc in self._creates:
            self._calls.start_create(create, inc)

    def abandon(self) -> None:
        for delete, _ in self._deletes:
            self._calls.unreserve_delete(delete)


def _in_bulk(action: Action) -> bool:
    """Actions `Tx.open_slots` / `Tx.adopt_many` write for many at once."""
    return isinstance(action, OpenSlot) or (
        isinstance(action, Adopt) and action.phase is not NodePhase.REQUESTED
    )


def _runs(batch: list[Action]) -> list[list[Action]]:
    """The batch cut into maximal runs of bulk actions and of the others."""
    runs: list[list[Action]] = []
    for action in batch:
        if runs and _in_bulk(runs[-1][-1]) == _in_bulk(action):
            runs[-1].append(action)
        else:
            runs.append([action])
    return runs


def _refused(refusal: StaleWrite | IllegalTransition) -> str:
    if isinstance(refusal, StaleWrite):
        return f"{STALE}: {refusal}"
    log.error("plan.illegal_transition", error=str(refusal))
    return f"skipped: {refusal}"


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
    level = getattr(log, _SEVERITY_LEVEL[notice.severity])
    level("plan.notice", key=notice.key, message=notice.reason)
