"""The executor: carries out a plan's actions in order, exactly as core/vocab/actions.py says.

Every write is the compare-and-set the planner asked for; a write that loses its race
(`StaleWrite`) is skipped with a log line, never forced. For the two actions that call the
cloud, only the intent is written here (CreateNode: a REQUESTED incarnation; DeleteNode:
DELETING and the call counted); the call itself starts once its intent is committed, and it
and its outcome run in the background (calls.py), so the tick goes on at once. A cloud
action for an incarnation that still has a call in flight, or whose name a delete in flight
(or one written earlier in this plan) may still reach, is postponed to the next tick (one
call per node at a time).

Actions are applied in batches of up to `RECORD_BATCH` (committed early once `BATCH_S` after
its turn to write came, so the lease keeper's renewal never waits long behind one), in the
plan's order: one transaction each, every action as if in a savepoint of its own, so a stale
action is undone alone and the others still commit; the calls of a batch's intents start after
its commit. A batch is cut into runs of one kind (`_runs`), each written as cheaply as it can:
OpenSlot and Adopt in bulk (`Tx.open_slots`, `Tx.adopt_many`); Transition, DeleteNode and
RecordCloud in a few statements for the whole run (`Tx.cas_many`: a storm tick's READY -> DEAD,
DEAD -> DELETING, DELETING -> DELETED, and the new cloud states of the nodes being deleted); the
rest one by one, `CHUNK` to a shared savepoint (`Tx.apply_each`).
Why: each commit syncs the WAL (store/engine.py), and each statement costs trips to the
database driver's thread (about 1 ms on this 2-core machine, several under load). Adopting
10,000 nodes after a lost database is 20,000 record actions: one sync each took ~300 s; a
preemption storm's hundreds of actions a tick, at two statements and a savepoint each, took
every tick's whole budget (docs/benchmarks.md). A crash loses at most the batch in flight,
whose actions the next plan asks for again, exactly as after a crash between two
single-action transactions.

The execution is bounded: once its budget has passed (the daemon gives it the poll interval,
`EXECUTE_BUDGET_S` by default), the batches left are not started (their actions are
"postponed: the tick's budget"), but for the plan's creates: the rule and its reasons are
core/planning/budget.py `budget_cut`.

tests/core/planning/executor_contract.py `apply_intent` is the same contract as a pure function;
the runtime tests compare the two. Every action gets one canonical log line: what, why, and how
it ended.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from tpucared.core.model.lifecycle import IllegalTransition
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.nodes.create_rate import CreatesSent
from tpucared.core.nodes.slots import DeletesInFlight
from tpucared.core.planning.budget import budget_cut
from tpucared.core.vocab.actions import (
    Action,
    Adopt,
    CreateNode,
    DeleteNode,
    Notice,
    OpenSlot,
    RecordCloud,
    Severity,
    Transition,
)
from tpucared.core.vocab.plan import Plan
from tpucared.runtime.nodes.calls import CloudCalls
from tpucared.runtime.nodes.records import DONE, Outcome, OutcomeKind, record
from tpucared.store import Applied, NotFound, StaleWrite, Store, Tx
from tpucared.store.write_many import CasAction, ConcurrentChange

log = structlog.get_logger(__name__)

# Record-only actions per transaction: large enough that the sync per commit no longer
# dominates, small enough that another process's writer (`tpucared down`) waits well under
# its busy_timeout for one batch.
RECORD_BATCH = 1024
# Seconds a tick's execution may run before the batches left wait for the next tick.
EXECUTE_BUDGET_S = 1.0
# Seconds one batch's transaction may stay open before it commits and the next one starts: the
# lease keeper's renewal (every third of the lease) waits behind an open write transaction,
# so none may last long, however loaded the machine (a CI run saw a 256-intent batch outlast
# a 3 s lease).
BATCH_S = 0.5
# Actions per shared savepoint (`Tx.apply_each`): a refused one runs its chunk's again alone.
CHUNK = 32

POSTPONED = Outcome(
    OutcomeKind.POSTPONED,
    "postponed: a call for this node (or a delete of its name) is still in flight",
)
OVER_BUDGET = Outcome(OutcomeKind.POSTPONED, "postponed: the tick's budget is spent")


@dataclass
class Execution:
    """What one plan came to: each action with its outcome (done, postponed, skipped)."""

    outcomes: list[tuple[Action, Outcome]] = field(default_factory=list)

    @property
    def done(self) -> list[Action]:
        return [a for a, outcome in self.outcomes if outcome.kind is OutcomeKind.DONE]

    @property
    def skipped(self) -> int:
        return sum(1 for _, outcome in self.outcomes if outcome.kind is not OutcomeKind.DONE)

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
            elapsed = self._monotonic() - started
            cut = budget_cut(actions[at:], elapsed=elapsed, budget=self._budget, applied_any=at > 0)
            if cut is not None:  # the creates still run (core/planning/budget.py)
                result.outcomes += [(a, OVER_BUDGET) for a in cut.postponed]
                log.info("execution.over_budget", budget_s=self._budget, left=len(cut.postponed))
                creates = list(cut.run)
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
    ) -> list[tuple[Action, Outcome]]:
        """One transaction for the batch, one savepoint per action, or a few statements for a
        run of OpenSlot and Adopt actions (a fleet found again: `Tx.adopt_many`); logged in
        the plan's order once committed. It commits early, after `BATCH_S`: the outcomes are
        those of the batch's first actions, the caller goes on with the rest."""
        order = {id(a): i for i, a in enumerate(batch)}
        outcomes: list[tuple[Action, Outcome]] = []
        intents = _Intents(self._calls)
        try:
            async with self._store.write() as tx:
                began = self._monotonic()  # BATCH_S counts from the turn to write, not before
                for run in _runs(batch):
                    if outcomes and self._monotonic() - began > BATCH_S:
                        break
                    if len(run) > 1 and _kind(run[0]) == BULK:
                        outcomes += await self._record_run(tx, run, now)
                        continue
                    if len(run) > 1 and _kind(run[0]) == CAS:
                        outcomes += await self._record_cas(tx, run, now, intents, live)
                        continue
                    for at in range(0, len(run), CHUNK):
                        if outcomes and self._monotonic() - began > BATCH_S:
                            break
                        outcomes += await self._apply(tx, run[at : at + CHUNK], now, intents, live)
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
    ) -> list[tuple[Action, Outcome]]:
        """A run of OpenSlot and Adopt actions: the slots first (an Adopt opens its own slot
        anyway, and opening one twice is a no-op), then the adoptions, each refused alone
        as `adopt` would refuse it. Its events come slots first, then nodes."""
        slots = [a for a in run if isinstance(a, OpenSlot)]
        adopts = [a for a in run if isinstance(a, Adopt)]
        outcomes: list[tuple[Action, Outcome]] = []
        if slots:
            await tx.open_slots(slots, now)
            outcomes += [(a, DONE) for a in slots]
        if adopts:
            refusals = await tx.adopt_many(adopts, now)
            for action, refusal in zip(adopts, refusals, strict=True):
                outcomes.append((action, DONE if refusal is None else _refused(refusal)))
        return outcomes

    async def _record_cas(
        self,
        tx: Tx,
        run: list[Action],
        now: datetime,
        intents: _Intents,
        live: Mapping[int, IncarnationRecord],
    ) -> list[tuple[Action, Outcome]]:
        """A run of Transition, DeleteNode and RecordCloud actions in a few statements
        (`Tx.cas_many`), each written or refused as it would be alone. A delete's
        call-in-flight checks come first, in order, for the whole run: one that waits for the
        name of a delete refused later in the run is postponed a tick, where alone it would
        have gone ahead. Should the run meet a concurrent change, it is undone and applied
        action by action."""
        outcomes: dict[int, Outcome] = {}
        writes: list[tuple[int, CasAction]] = []
        for i, action in enumerate(run):
            assert isinstance(action, Transition | DeleteNode | RecordCloud)
            if isinstance(action, DeleteNode):
                if self._calls.busy(action.incarnation_id) or self._calls.name_busy(action):
                    outcomes[i] = POSTPONED
                    continue
                self._calls.reserve_delete(action)
            writes.append((i, action))
        reserved = [a for _, a in writes if isinstance(a, DeleteNode)]
        try:
            async with tx.savepoint():
                results = await tx.cas_many([a for _, a in writes], now)
        except BaseException as exc:
            for delete in reserved:
                self._calls.unreserve_delete(delete)
            if not isinstance(exc, ConcurrentChange):
                raise
            log.warning("execution.concurrent_change", error=str(exc), actions=len(run))
            done: list[tuple[Action, Outcome]] = []
            for at in range(0, len(run), CHUNK):
                done += await self._apply(tx, run[at : at + CHUNK], now, intents, live)
            return done
        for (i, action), result in zip(writes, results, strict=True):
            if isinstance(result, IncarnationRecord):
                outcomes[i] = DONE
                if isinstance(action, DeleteNode):
                    intents.deleting(action, result)
                continue
            if isinstance(action, DeleteNode):
                self._calls.unreserve_delete(action)
            with structlog.contextvars.bound_contextvars(**_context(action, live)):
                outcomes[i] = _outcome(Applied(error=result))
        return [(action, outcomes[i]) for i, action in enumerate(run)]

    async def _apply(
        self,
        tx: Tx,
        chunk: list[Action],
        now: datetime,
        intents: _Intents,
        live: Mapping[int, IncarnationRecord],
    ) -> list[tuple[Action, Outcome]]:
        """Each action as if in a savepoint of its own (`Tx.apply_each`: one shared, the
        actions run again alone if one is refused, the chunk's intents forgotten first)."""
        mark = intents.mark()

        def work(action: Action) -> Callable[[Tx], Awaitable[Outcome]]:
            async def apply(tx: Tx) -> Outcome:
                with structlog.contextvars.bound_contextvars(**_context(action, live)):
                    if isinstance(action, CreateNode | DeleteNode):
                        return await self._intent(tx, action, now, intents)
                    return await record(tx, action, now)

            return apply

        applied = await tx.apply_each(
            [work(a) for a in chunk],
            refusals=(StaleWrite, NotFound, IllegalTransition),
            undone=lambda: intents.forget_since(mark),
        )
        out: list[tuple[Action, Outcome]] = []
        for action, result in zip(chunk, applied, strict=True):
            with structlog.contextvars.bound_contextvars(**_context(action, live)):
                out.append((action, _outcome(result)))
        return out

    def _log(self, action: Action, outcome: Outcome) -> None:
        if isinstance(action, Notice):
            _log_notice(action)
        elif isinstance(action, CreateNode | DeleteNode) and outcome.kind is OutcomeKind.DONE:
            # The canonical line comes when the call ends (calls.py); this is its intent.
            log.debug(
                action.log_event, action=action.summary(), reason=action.reason, outcome="intent"
            )
        else:
            level = log.info if outcome.expected else log.warning
            level(
                action.log_event, action=action.summary(), reason=action.reason,
                outcome=outcome.says,
            )  # fmt: skip

    async def _intent(
        self, tx: Tx, action: CreateNode | DeleteNode, now: datetime, intents: _Intents
    ) -> Outcome:
        """A cloud action's intent, in its own savepoint of the batch's `tx`; its call is
        started by `intents` once the batch is committed."""
        match action:
            case CreateNode():
                if self._calls.name_busy(action):
                    return POSTPONED
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
                    inc = await tx.begin_delete(
                        action.incarnation_id,
                        action.expected,
                        now,
                        end_reason=action.end_reason,
                        reason=action.reason,
                        cause=action.cause,
                    )
                except BaseException:
                    self._calls.unreserve_delete(action)
                    raise
                intents.deleting(action, inc)
        return DONE


class _Intents:
    """The cloud calls whose intents a batch wrote, started only once it commits."""

    def __init__(self, calls: CloudCalls) -> None:
        self._calls = calls
        self._creates: list[tuple[CreateNode, IncarnationRecord]] = []
        self._deletes: list[tuple[DeleteNode, IncarnationRecord]] = []

    def mark(self) -> tuple[int, int]:
        return len(self._creates), len(self._deletes)

    def forget_since(self, mark: tuple[int, int]) -> None:
        """The intents noted since `mark` were undone (`Tx.apply_each`): no call for them,
        their deletes' names free again."""
        creates, deletes = mark
        for delete, _ in self._deletes[deletes:]:
            self._calls.unreserve_delete(delete)
        del self._creates[creates:], self._deletes[deletes:]

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


BULK = "bulk"  # written for many at once by `Tx.open_slots` / `Tx.adopt_many`
CAS = "cas"  # compare-and-sets written for many at once by `Tx.cas_many`
ONE = "one"  # one at a time


def _kind(action: Action) -> str:
    if isinstance(action, OpenSlot) or (
        isinstance(action, Adopt) and action.phase is not NodePhase.REQUESTED
    ):
        return BULK
    if isinstance(action, Transition | DeleteNode | RecordCloud):
        return CAS
    return ONE


def _runs(batch: list[Action]) -> list[list[Action]]:
    """The batch cut into maximal runs of actions of one kind."""
    runs: list[list[Action]] = []
    for action in batch:
        if runs and _kind(runs[-1][-1]) == _kind(action):
            runs[-1].append(action)
        else:
            runs.append([action])
    return runs


def _outcome(applied: Applied[Outcome]) -> Outcome:
    """An action's outcome: DONE or POSTPONED as it said, or why it was refused."""
    match applied.error:
        case None:
            assert applied.value is not None
            return applied.value
        case StaleWrite() | IllegalTransition() as refusal:
            return _refused(refusal)
        case error:
            return Outcome(OutcomeKind.SKIPPED, f"skipped: {error}")  # NotFound


def _refused(refusal: StaleWrite | IllegalTransition) -> Outcome:
    if isinstance(refusal, StaleWrite):
        return Outcome(OutcomeKind.STALE, f"skipped: stale: {refusal}")
    log.error("plan.illegal_transition", error=str(refusal))
    return Outcome(OutcomeKind.SKIPPED, f"skipped: {refusal}")


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
