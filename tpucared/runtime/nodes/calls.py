"""The cloud half of CreateNode and DeleteNode: one call each, in the background, then its
outcome recorded (the second transaction of core/vocab/actions.py).

The executor (executor.py) has already recorded the intent when it hands an action here, so
the record is safe whatever happens to the call: a crash, a hang, a cancel at shutdown. Each
call runs as its own task (tasks.TaskSet), bounded by semaphores (`Policy.max_creates`
creates, `max_deletes` deletes), so a slow API never stalls the tick. Outcomes are facts,
recorded only in the phase they belong to (core/nodes/outcomes.py decides which):
- create accepted: REQUESTED -> CREATING with `operation`; if the planner already moved it to
  CREATING (it saw the node listed before the call returned), just `operation` is recorded.
  The operation is then watched (operations.py), which records the create attempt.
- create refused: `error` = its kind (ALREADY_EXISTS included) and the slot's `last_error`,
  with a CreateAttemptRecord, in one transaction, only while still REQUESTED: once the node
  is listed, a lost response does not make the create a failure.
- delete accepted: `operation`; refused (NOT_FOUND included): `error`, and `operation`
  cleared (a create operation still recorded there no longer says anything about the
  delete). Both only while DELETING.
A refused call wakes the reconcile loop so the planner decides on it at once.

Fencing (runtime/leader.py): `guard` runs right before every create and delete request and
raises `LeaseLost` unless this process leads; so do the outcome's writes (the store's fence).
Either way the call's task ends quietly, leaving the intent as recorded for the next leader.

What became of the calls a previous process left in flight: interrupted.py.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from tpucared.core.model.machines import hosts_of
from tpucared.core.model.records import CreateAttemptRecord, IncarnationRecord
from tpucared.core.model.specs import ErrorKind, NodeOptions
from tpucared.core.nodes import outcomes
from tpucared.core.nodes.create_rate import WINDOW, CreatesSent, RateKey
from tpucared.core.nodes.slots import CallTarget, DeletesInFlight, call_target, delete_in_flight
from tpucared.core.vocab.actions import CreateNode, DeleteNode
from tpucared.ports.cloud import DEFAULT_SA_SCOPES, CloudError, NodeShape, OperationState
from tpucared.runtime.clock import Clock
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.deadlines import MUTATION_DEADLINE_S, answered_within
from tpucared.runtime.nodes.operations import OperationWatcher
from tpucared.runtime.tasks import TaskSet
from tpucared.runtime.wakeup import Wakeup
from tpucared.store import StaleWrite, Store, Tx
from tpucared.store.errors import LeaseLost

log = structlog.get_logger(__name__)

MAX_DELETES = 128  # delete calls in flight at once: deletes are cheap, but not free

NO_OPTIONS = NodeOptions()

AttemptHook = Callable[[CreateAttemptRecord], None]  # e.g. the create counter of /metrics


@dataclass(frozen=True)
class NodeTemplate:
    """What every node we create gets besides the action's own fields."""

    project: str  # `gcp.project`: where an action of core DEFAULT_PROJECT goes
    metadata: Mapping[str, str]  # e.g. {"ssh-keys": "tpucared:ssh-ed25519 AAAA... tpucared"}
    enable_external_ips: bool
    options: Mapping[str, NodeOptions] = field(default_factory=dict)  # by fleet name

    def shape(self, a: CreateNode) -> NodeShape:
        """The node `a` asks for, as its cloud's port takes it."""
        o = self.options.get(a.fleet, NO_OPTIONS)
        return NodeShape(
            accelerator_type=a.accelerator_type,
            extra=a.extra,
            capacity=a.capacity,
            labels=a.labels,
            # Ours last: the config refuses the keys we own, and ours must win anyway.
            metadata={**o.metadata, **self.metadata},
            tags=o.tags,
            enable_external_ips=self.enable_external_ips,
            network=o.network,
            subnetwork=o.subnetwork,
            service_account=o.service_account,
            service_account_scopes=o.service_account_scopes or DEFAULT_SA_SCOPES,
            data_disks=o.data_disks,
            on_preemption=o.on_preemption,
            topology=o.topology,
            # The config checked the pair (config/apis.py): 1 is only ever "no topology".
            hosts=hosts_of(a.accelerator_type, o.topology) or 1,
            max_run_duration_s=o.max_run_duration_s,
            reservation_bound=bool(o.reservation_bound),
        )

    def project_of(self, project: str) -> str:
        """The real project of an action's or a record's (core DEFAULT_PROJECT: ours)."""
        return project or self.project

    def reservation(self, a: CreateNode) -> str | None:
        return self.options.get(a.fleet, NO_OPTIONS).reservation


class CloudCalls:
    def __init__(
        self,
        clouds: CloudMap,
        store: Store,
        clock: Clock,
        template: NodeTemplate,
        watcher: OperationWatcher,
        wakeup: Wakeup,
        tasks: TaskSet,
        *,
        max_creates: int,
        max_deletes: int = MAX_DELETES,
        on_attempt: AttemptHook | None = None,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self._clouds = clouds
        # Before every mutating request: raises LeaseLost unless this process leads (the
        # lease keeper's check, runtime/leader.py). The intent stays recorded, uncalled: the
        # next leader records it interrupted and reconciles it. None: not fenced (`down`).
        self._guard = guard
        self._on_attempt = on_attempt
        self._store = store
        self._clock = clock
        self._template = template
        self._watcher = watcher
        self._wakeup = wakeup
        self._tasks = tasks
        self._creates = asyncio.Semaphore(max_creates)
        self._deletes = asyncio.Semaphore(max_deletes)
        self._busy: set[int] = set()  # incarnations with a call in flight
        self._waiting: set[int] = set()  # ... for which an action was postponed
        # (project, zone, name) -> the incarnation whose delete of that node or queued
        # resource is in flight, retries included (`name_busy`).
        self._deleting: dict[tuple[str, str, str], int] = {}
        self._name_waited = False  # an action waited for one of those: wake when it ends
        self._sent: dict[RateKey, deque[datetime]] = {}  # the create rate's input: `creates_sent`

    def busy(self, incarnation_id: int) -> bool:
        """A call for this incarnation is in flight: its next one must wait (one call per
        node at a time; the loop is woken when this one ends)."""
        if incarnation_id in self._busy:
            self._waiting.add(incarnation_id)
            return True
        return False

    def deletes_in_flight(self) -> DeletesInFlight:
        """The deletes in flight: their calls here (retries included) and their operations
        the watcher follows (a delete sent while one runs meets 409 and retries). The planner
        holds what they may reach (core/nodes/slots.py `delete_in_flight`)."""
        found: dict[CallTarget, set[int]] = {}
        for key, holder in self._deleting.items():
            found.setdefault(key, set()).add(holder)
        for key, holder in self._watcher.deletes():
            found.setdefault(key, set()).add(holder)
        return {key: frozenset(holders) for key, holders in found.items()}

    def creates_sent(self) -> CreatesSent:
        """When the creates of the last minute were sent, by (api, project), for the create
        rate (core/nodes/create_rate.py); older ones are forgotten here."""
        now = self._clock.now()
        for times in self._sent.values():
            while times and now - times[0] >= WINDOW:
                times.popleft()
        return {key: tuple(times) for key, times in self._sent.items() if times}

    def wake_when_deletes_end(self) -> None:
        """The plan held an action for a delete in flight: wake the loop when one ends."""
        self._name_waited = True

    def name_busy(self, action: CreateNode | DeleteNode) -> bool:
        """The planner's rule again, right before the call (`delete_in_flight`): a delete
        started earlier in this very plan's execution is not in the plan's input. The loop is
        woken when the delete ends (its call here, its operation by the watcher)."""
        target = call_target(action)
        holders = self._watcher.deleting(target)
        if target in self._deleting:
            holders.add(self._deleting[target])
        if delete_in_flight(action, {target: frozenset(holders)}) is None:
            return False
        self._name_waited = True
        return True

    def _release(self, inc: IncarnationRecord) -> None:
        self._busy.discard(inc.id)
        for key in [k for k, holder in self._deleting.items() if holder == inc.id]:
            del self._deleting[key]
            if self._name_waited:
                self._name_waited = False
                self._wakeup.set(f"delete of {key[2]} ended")
        if inc.id in self._waiting:
            self._waiting.discard(inc.id)
            self._wakeup.set(f"call for {inc.node_name} ended")

    def reserve_delete(self, action: DeleteNode) -> None:
        """Before a delete's intent is written: from now on its node is busy and its name
        held (`busy`, `name_busy`), so a later action of the same plan waits for it even
        though the call starts only once the intents are committed (executor.py)."""
        self._busy.add(action.incarnation_id)
        self._deleting[call_target(action)] = action.incarnation_id

    def unreserve_delete(self, action: DeleteNode) -> None:
        """Its intent was not written after all (stale, or the transaction failed)."""
        self._busy.discard(action.incarnation_id)
        if self._deleting.get(call_target(action)) == action.incarnation_id:
            del self._deleting[call_target(action)]

    def start_create(self, action: CreateNode, inc: IncarnationRecord) -> None:
        self._busy.add(inc.id)
        self._tasks.spawn(self._create(action, inc), name=f"create {inc.node_name} #{inc.id}")

    def start_delete(self, action: DeleteNode, inc: IncarnationRecord) -> None:
        self._busy.add(inc.id)
        self._deleting[call_target(action)] = inc.id
        self._tasks.spawn(self._delete(action, inc), name=f"delete {inc.node_name} #{inc.id}")

    # -- create -----------------------------------------------------------------------------

    async def _create(self, action: CreateNode, inc: IncarnationRecord) -> None:
        ctx = structlog.contextvars.bound_contextvars(
            fleet=action.fleet, slot=action.slot, node=action.node_name
        )
        with ctx:
            try:
                async with self._creates:
                    started_at, started = self._clock.now(), self._clock.monotonic()
                    try:
                        op = await self._call_create(action)
                    except CloudError as error:
                        await self._create_refused(action, inc, error, started_at, started)
                        return
                    await self._create_accepted(action, inc, op, started_at, started)
            except LeaseLost as exc:
                _not_leading(action, exc)
            finally:
                self._release(inc)

    async def _call_create(self, a: CreateNode) -> OperationState:
        if self._guard is not None:
            self._guard()
        self._sent.setdefault((a.api, a.project), deque()).append(self._clock.now())
        t = self._template
        # Multislice: nodes `{queued_resource}-0..` (core/nodes/slots.py names them so).
        call = self._clouds.of(a.api).create(
            t.project_of(a.project),
            a.zone,
            a.node_name,
            t.shape(a),
            queued=a.queued_resource,
            slices=a.slices,
            reservation=t.reservation(a),
        )
        return await answered_within(MUTATION_DEADLINE_S, f"create {a.node_name}", call)

    async def _create_accepted(
        self,
        action: CreateNode,
        inc: IncarnationRecord,
        op: OperationState,
        started_at: datetime,
        started: float,
    ) -> None:
        now = self._clock.now()

        async def record(tx: Tx) -> bool:
            current = await tx.incarnation(inc.id)
            phase = None if current is None else outcomes.accepted_create_phase(current.phase)
            if current is None or phase is None:
                return False
            if phase is not current.phase:
                await tx.transition(
                    inc.id,
                    current.phase,
                    phase,
                    now,
                    reason=f"{inc.node_name}: create accepted",
                    operation=op.name,
                )
            else:
                await tx.record_outcome(
                    inc.id,
                    phase,
                    now,
                    operation=op.name,
                    reason=f"{inc.node_name}: create accepted (node already listed)",
                )
            return True

        try:
            recorded = await self._store.grouped(record)
        except StaleWrite:
            recorded = False
        _log_action(action, None, operation=op.name, latency_s=self._since(started))
        if not recorded:
            log.info(
                "call.create_outcome_stale", hint="the incarnation moved on", incarnation=inc.id
            )
        # Watched even when not recorded: the create attempt is still worth recording.
        self._watcher.watch(op, inc, "create", started_at=started_at, started=started)

    async def _create_refused(
        self,
        action: CreateNode,
        inc: IncarnationRecord,
        error: CloudError,
        started_at: datetime,
        started: float,
    ) -> None:
        now = self._clock.now()
        latency = self._since(started)
        attempt = CreateAttemptRecord(
            fleet=action.fleet,
            slot=action.slot,
            zone=action.zone,
            accelerator_type=action.accelerator_type,
            started_at=started_at,
            outcome=error.kind.value,
            latency_s=round(latency, 3),
            message=error.message,
            incarnation_id=inc.id,
        )

        async def record(tx: Tx) -> bool:
            current = await tx.incarnation(inc.id)
            phase = outcomes.call_phase("create")
            still = current is not None and current.phase is phase
            if still:
                await tx.record_outcome(
                    inc.id,
                    phase,
                    now,
                    error=error.kind,
                    last_error=error.message,
                    reason=f"{inc.node_name}: create refused: {error}",
                )
            await tx.record_create_attempt(attempt)
            return still

        still_requested = await self._store.grouped(record)
        if self._on_attempt is not None:
            self._on_attempt(attempt)
        _log_action(
            action,
            error.kind,
            error=str(error),
            attempts=error.attempts,
            latency_s=latency,
            recorded=still_requested,
        )
        self._wakeup.set(f"create of {inc.node_name} refused")

    # -- delete -----------------------------------------------------------------------------

    async def _delete(self, action: DeleteNode, inc: IncarnationRecord) -> None:
        ctx = structlog.contextvars.bound_contextvars(
            fleet=action.fleet, slot=action.slot, node=action.node_name
        )
        with ctx:
            try:
                async with self._deletes:
                    started_at, started = self._clock.now(), self._clock.monotonic()
                    try:
                        op = await self._call_delete(action, inc)
                    except CloudError as error:
                        await self._delete_outcome(action, inc, None, error, started)
                        return
                    await self._delete_outcome(action, inc, op, None, started)
                    self._watcher.watch(op, inc, "delete", started_at=started_at, started=started)
            except LeaseLost as exc:
                _not_leading(action, exc)
            finally:
                self._release(inc)

    async def _call_delete(self, a: DeleteNode, inc: IncarnationRecord) -> OperationState:
        if self._guard is not None:
            self._guard()
        project = self._template.project_of(a.project)
        # A queued slot goes with its nodes (the port deletes them first); through the cloud
        # that made the node, whatever its fleet is now.
        call = self._clouds.for_node(inc).delete(
            project, a.zone, a.node_name, queued=a.queued_resource
        )
        return await answered_within(MUTATION_DEADLINE_S, f"delete {a.node_name}", call)

    async def _delete_outcome(
        self,
        action: DeleteNode,
        inc: IncarnationRecord,
        op: OperationState | None,
        error: CloudError | None,
        started: float,
    ) -> None:
        now = self._clock.now()

        async def record(tx: Tx) -> None:
            if error is None:
                assert op is not None
                await tx.record_outcome(
                    inc.id,
                    outcomes.call_phase("delete"),
                    now,
                    operation=op.name,
                    reason=f"{inc.node_name}: delete accepted",
                )
            else:
                await tx.record_outcome(
                    inc.id,
                    outcomes.call_phase("delete"),
                    now,
                    operation=None,
                    error=error.kind,
                    reason=f"{inc.node_name}: delete refused: {error}",
                )

        recorded = True
        try:
            await self._store.grouped(record)
        except StaleWrite:
            recorded = False
        latency = self._since(started)
        if error is None:
            assert op is not None
            _log_action(action, None, operation=op.name, latency_s=latency)
        else:
            _log_action(
                action,
                error.kind,
                error=str(error),
                attempts=error.attempts,
                latency_s=latency,
                recorded=recorded,
            )
            self._wakeup.set(f"delete of {inc.node_name} refused")

    def _since(self, started: float) -> float:
        return round(self._clock.monotonic() - started, 3)


def _not_leading(action: CreateNode | DeleteNode, exc: LeaseLost) -> None:
    """The lease was lost before the call, or before its outcome was recorded: the intent
    stays as recorded, and the next leader records it interrupted and reconciles it."""
    log.info("call.left_to_next_leader", action=action.summary(), why=str(exc))


def _log_action(
    action: CreateNode | DeleteNode, refused: ErrorKind | None, **fields: object
) -> None:
    """The canonical line of a create or delete: what, why, and how the call ended (accepted,
    or refused with the error's kind)."""
    level = log.info if refused is None else log.warning
    level(
        action.log_event,
        action=action.summary(),
        reason=action.reason,
        outcome="accepted" if refused is None else f"refused: {refused.value}",
        **fields,
    )
