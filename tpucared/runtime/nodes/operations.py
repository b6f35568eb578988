"""The operation watcher: polls every create/delete operation in flight and records its end.

A create or delete call returns a long-running operation (calls.py records its name on the
incarnation); whether a create found capacity is only known when that operation ends (a
CAPACITY error). This root task polls each operation through its fleet's Cloud port
(`Cloud.poll`: the TPU API's `operations.get`) on a short, growing
schedule (`PollSchedule`, the daemon's backoff rule without jitter; a create's first poll
learnt from its zone's recent failing creates, core/nodes/op_timing.py, by the API's own
createTime to endTime), and when one is done writes, in one transaction:
- on the incarnation, if the operation is still the one it records: `operation = None`, and
  the classified error when it failed, provided the incarnation is still in a phase the
  operation's error belongs to (core/nodes/outcomes.py decides; a create's message is also
  the slot's last_error);
- for a create, the `CreateAttemptRecord` (zone, type, outcome, message, latency), exactly
  once: the same transaction clears the operation name that led us to it.
Then it wakes the reconcile loop, so the planner decides on the outcome at once instead of at
the next poll. Operations recorded by a previous run (the daemon was restarted mid-create)
are picked up from each tick's snapshot (`adopt`). Nothing here decides anything.

Each poll runs on its own, within a deadline (runtime/deadlines.py): a poll that hangs (one
zone's API stalls) delays only its own operation, never the others' outcomes; cut at the
deadline, it counts as a failed poll and is tried again later.

An operation of a cloud that can wait on it (Compute Engine's zoneOperations.wait:
runtime/nodes/op_waits.py) is waited on instead: the first wait goes at once (no learnt
delay), under `WAIT_DEADLINE_S`; an answer not DONE is followed by another wait, paced; a wait
cut or failed counts as a failed poll. At most `MAX_HELD_WAITS` operations are waited on at
once; beyond it they are polled as above until a place frees.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

import structlog

from tpucared.core.model.backoff import Backoff, in_seconds
from tpucared.core.model.records import CreateAttemptRecord, IncarnationRecord
from tpucared.core.model.specs import DEFAULT_API, ErrorKind
from tpucared.core.nodes import outcomes
from tpucared.core.nodes.op_timing import RECENT, first_create_poll
from tpucared.core.nodes.outcomes import Verb
from tpucared.ports.cloud import CloudError, OperationState
from tpucared.runtime.clock import Clock
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.deadlines import answered_within
from tpucared.runtime.nodes import op_waits
from tpucared.runtime.nodes.op_waits import WAIT_DEADLINE_S, WaitPlaces, next_wait_in, waiter
from tpucared.runtime.wakeup import Wakeup
from tpucared.store import KEEP, Store, Tx

log = structlog.get_logger(__name__)

# Operation names remembered as done, so that a stale snapshot cannot revive one.
_FINISHED_MEMORY = 10_000
# 0.5 s, then doubling, at most 5 s apart, without jitter.
DEFAULT_POLLING: Backoff[float] = Backoff(0.5, 5.0, jitter=0.0)


@dataclass(frozen=True)
class PollSchedule:
    """First poll `rule.base` s after the call, each later one `rule.factor` times later, at
    most `rule.cap` s apart; after a poll that failed, `rule.cap` apart from then on."""

    rule: Backoff[float] = DEFAULT_POLLING

    @classmethod
    def for_poll_interval(cls, poll_interval: float) -> PollSchedule:
        # Never slower than the loop itself, never faster than 2 polls per second at default
        # settings: a create's outcome is what capacity hunting waits for.
        return cls(in_seconds(min(0.5, poll_interval / 2), min(5.0, poll_interval), jitter=0.0))

    @property
    def first(self) -> float:
        return self.rule.base

    def after(self, polls: int, failures: int) -> float:
        """The wait before the next poll, once `polls` polls saw the operation still running
        and `failures` polls failed."""
        return self.rule.cap if failures else self.rule.delay(polls + 1, 0.0)


@dataclass
class Watched:
    name: str
    incarnation_id: int
    verb: Verb
    node_name: str
    fleet: str
    slot: int
    zone: str
    accelerator_type: str
    started_at: datetime  # when the call was issued (the intent's time after a restart)
    started: float | None  # monotonic start, when this process made the call
    next_poll: float = 0.0
    polls: int = 0  # polls that saw it still running
    failures: int = field(default=0)
    # What the operation acts on: (project, zone, queued resource or node name).
    target: tuple[str, str, str] = ("", "", "")
    api: str = DEFAULT_API  # the cloud that handed it out: the node's (IncarnationRecord.api)
    queued: bool = False  # it acts on a queued resource (shared by a multislice's slices)
    waits: int = 0  # waits that answered it not DONE (op_waits.py)


class OperationWatcher:
    def __init__(
        self,
        clouds: CloudMap,
        store: Store,
        clock: Clock,
        wakeup: Wakeup,
        schedule: PollSchedule | None = None,
        on_attempt: Callable[[CreateAttemptRecord], None] | None = None,
        deadline: float = 10.0,
        max_waits: int | None = None,
    ) -> None:
        """`max_waits`: operations waited on at once (op_waits.py; None: `MAX_HELD_WAITS`)."""
        self._clouds = clouds
        self._on_attempt = on_attempt
        self._store = store
        self._clock = clock
        self._wakeup = wakeup
        self._schedule = schedule or PollSchedule()
        # (zone, accelerator type) -> how long its recent failing creates took (op_timing.py).
        self._failing: dict[tuple[str, str], deque[float]] = {}
        # (zone, accelerator type) -> how long its recent deletes took, likewise.
        self._deleting_took: dict[tuple[str, str], deque[float]] = {}
        self._watched: dict[str, Watched] = {}
        self._finished: deque[str] = deque(maxlen=_FINISHED_MEMORY)
        self._finished_set: set[str] = set()
        self._changed = Wakeup()
        self._deadline = deadline  # seconds an operations.get may take, retries included
        self._polling: dict[str, asyncio.Task[None]] = {}  # by operation name
        # The operations followed with the cloud's wait (op_waits.py), at most so many.
        self._waits = WaitPlaces(op_waits.MAX_HELD_WAITS if max_waits is None else max_waits)

    def __len__(self) -> int:
        return len(self._watched)

    def watch(
        self,
        operation: OperationState,
        inc: IncarnationRecord,
        verb: Verb,
        *,
        started_at: datetime,
        started: float | None,
    ) -> None:
        """Poll `operation` until done (idempotent per operation name)."""
        if operation.name in self._watched or operation.name in self._finished_set:
            return
        # Waited on: the first wait at once, the cloud answers when it ends. Else (or no
        # place free) the first poll, learnt.
        waits = not operation.done and self._can_wait(inc.api, operation.name)
        first = 0.0 if operation.done or waits else self._first_poll(inc, verb, started)
        self._watched[operation.name] = Watched(
            name=operation.name,
            incarnation_id=inc.id,
            verb=verb,
            node_name=inc.node_name,
            fleet=inc.fleet,
            slot=inc.slot,
            zone=inc.zone,
            accelerator_type=inc.accelerator_type,
            api=inc.api,
            started_at=started_at,
            started=started,
            next_poll=self._clock.monotonic() + first,
            target=(inc.project, inc.zone, inc.queued_resource or inc.node_name),
            queued=inc.queued_resource is not None,
        )
        self._changed.set("watch")

    def deleting(self, target: tuple[str, str, str]) -> set[int]:
        """The incarnations whose delete operations of this (project, zone, queued resource
        or node) still run."""
        return {
            w.incarnation_id
            for w in self._watched.values()
            if w.verb == "delete" and w.target == target
        }

    def deletes(self) -> list[tuple[tuple[str, str, str], int]]:
        """The delete operations still running: (what each reaches, as (project, zone,
        queued resource or node), and its incarnation)."""
        return [(w.target, w.incarnation_id) for w in self._watched.values() if w.verb == "delete"]

    def forget_deleted(self, incarnation_ids: Collection[int]) -> None:
        """The lists showed these incarnations' nodes gone (the planner moved them to
        DELETED): their delete operations need no more polls, and the names they held are free
        (a wake, so the slots' creates go out now rather than when a poll sees the operations
        end). In a preemption storm those polls were most of the requests. Not a queued
        resource's: its slices share it, and the resource may outlive a slice's node."""
        done = [
            w
            for w in self._watched.values()
            if w.verb == "delete"
            and w.incarnation_id in incarnation_ids
            and not w.queued
            and w.name not in self._polling
        ]
        for w in done:
            self._forget(w.name)
        if done:
            self._wakeup.set(f"{len(done)} deleted node(s) gone from the lists", quiet=True)

    def adopt(self, live: Iterable[IncarnationRecord]) -> None:
        """Watch operations recorded on live incarnations that nobody watches (a previous
        run's, or one whose call returned while we were down)."""
        for inc in live:
            name = inc.operation
            if name is None or name in self._watched or name in self._finished_set:
                continue
            verb = outcomes.operation_verb(inc.phase)
            log.info(
                "operation.resumed",
                node=inc.node_name,
                incarnation=inc.id,
                operation=name,
                verb=verb,
            )
            self.watch(
                OperationState(name=name), inc, verb, started_at=inc.requested_at, started=None
            )

    async def run(self, stop: asyncio.Event) -> None:
        """The root task: start the polls that are due, each on its own; sleep until the next
        is due, a poll ends or a new watch. A poll that fails for the store ends the task."""
        try:
            while not stop.is_set():
                self._raise_failed_poll()
                now = self._clock.monotonic()
                waiting = [w for w in self._watched.values() if w.name not in self._polling]
                for w in waiting:
                    if w.next_poll <= now:
                        # A place freed since it was watched: this poll is a wait.
                        self._can_wait(w.api, w.name)
                        task = asyncio.create_task(self._poll(w), name=f"poll {w.name}")
                        self._polling[w.name] = task
                        task.add_done_callback(partial(self._poll_ended, w.name))
                later = [w.next_poll for w in waiting if w.next_poll > now]
                wait = min(later, default=now + 3600) - now
                await self._changed.wait(self._clock, wait, stop)
                self._changed.take()
            self._raise_failed_poll()
        finally:
            for task in self._polling.values():
                task.cancel()
            await asyncio.gather(*self._polling.values(), return_exceptions=True)

    def _poll_ended(self, name: str, _: asyncio.Task[None]) -> None:
        task = self._polling.get(name)
        if task is not None and (task.cancelled() or task.exception() is None):
            del self._polling[name]  # a failed one stays, for run() to raise
        self._changed.set("poll ended")

    def _raise_failed_poll(self) -> None:
        for task in self._polling.values():
            if task.done() and not task.cancelled():
                failure = task.exception()
                if failure is not None:
                    raise failure

    def _can_wait(self, api: str, name: str) -> bool:
        """Whether operation `name` of cloud `api` is waited on: its cloud can, and it holds
        (or now takes) one of the watcher's wait places."""
        if name in self._waits:
            return True
        cloud = self._clouds.clouds.get(api)  # none: its poll says so, as before waits
        return cloud is not None and waiter(cloud, name) is not None and self._waits.take(name)

    async def _poll(self, w: Watched) -> None:
        sent = self._clock.monotonic()
        cloud = self._clouds.of(w.api)
        waits = waiter(cloud, w.name) if w.name in self._waits else None
        try:
            if waits is not None:
                op = await answered_within(WAIT_DEADLINE_S, f"wait {w.name}", waits.wait(w.name))
            else:
                op = await answered_within(self._deadline, f"poll {w.name}", cloud.poll(w.name))
        except CloudError as error:
            if error.kind is ErrorKind.NOT_FOUND:
                # The API forgot it (operations expire): its outcome is unknowable; the
                # planner goes by what the lists show.
                log.warning(
                    "operation.not_found", hint="forgetting it", operation=w.name, node=w.node_name
                )
                await self._finish(w, None)
                return
            w.failures += 1
            w.next_poll = self._clock.monotonic() + self._schedule.after(w.polls, w.failures)
            log.warning(
                "operation.poll_failed",
                hint="trying again",
                operation=w.name,
                node=w.node_name,
                kind=error.kind.value,
                error=str(error),
                failures=w.failures,
                waited=waits is not None,
            )
            return
        if not op.done and waits is not None:
            # The cloud stopped holding it (its limit, or early): wait again, paced.
            w.waits += 1
            now = self._clock.monotonic()
            w.next_poll = now + next_wait_in(w.waits, now - sent)
            return
        if not op.done:
            w.polls += 1
            w.next_poll = self._clock.monotonic() + self._schedule.after(w.polls, w.failures)
            return
        await self._finish(w, op)

    async def _finish(self, w: Watched, op: OperationState | None) -> None:
        """Record the end of `w` (op None: lost) and wake the loop."""
        error = op.error if op is not None else None
        verb = outcomes.ended_verb(w.verb, op.verb if op is not None else None)
        now = self._clock.now()
        latency = (
            self._clock.monotonic() - w.started
            if w.started is not None
            else (now - w.started_at).total_seconds()
        )
        lost = op is None
        attempt = _attempt(w, error, latency) if verb == "create" and not lost else None
        if op is not None:
            self._learn(w, verb, error, op)

        async def record(tx: Tx) -> None:
            inc = await tx.incarnation(w.incarnation_id)
            if inc is not None and inc.operation == w.name:
                failed = error if outcomes.operation_error_fits(verb, inc.phase) else None
                slot_error = failed is not None and outcomes.sets_last_error(verb)
                await tx.record_outcome(
                    inc.id,
                    inc.phase,
                    now,
                    operation=None,
                    error=failed.kind if failed is not None else KEEP,
                    last_error=failed.message if slot_error and failed is not None else KEEP,
                    reason=_outcome_text(w, verb, error, op),
                )
            if attempt is not None:
                await tx.record_create_attempt(attempt)

        await self._store.grouped(record)
        if attempt is not None and self._on_attempt is not None:
            self._on_attempt(attempt)
        self._forget(w.name)
        log.info(
            "operation.finished",
            verb=verb,
            fleet=w.fleet,
            slot=w.slot,
            node=w.node_name,
            incarnation=w.incarnation_id,
            operation=w.name,
            outcome="lost" if lost else ("ok" if error is None else error.kind.value),
            error=error.message if error is not None else None,
            latency_s=round(latency, 3),
        )
        # A stockout leaves no node behind: the lists need not be taken again for it.
        stockout = verb == "create" and error is not None and error.kind is ErrorKind.CAPACITY
        self._wakeup.set(f"{verb} operation of {w.node_name} finished", quiet=stockout)

    def _first_poll(self, inc: IncarnationRecord, verb: Verb, started: float | None) -> float:
        """Seconds from now to the first poll: learnt from the recent operations of the same
        verb, zone and type (a create's from the failing ones; core/nodes/op_timing.py),
        counted from the call's start."""
        default = self._schedule.first
        learnt = self._failing if verb == "create" else self._deleting_took
        recent = learnt.get((inc.zone, inc.accelerator_type))
        if not recent or started is None:
            return default
        after_call = first_create_poll(recent, default, self._schedule.rule.cap)
        return max(0.0, after_call - (self._clock.monotonic() - started))

    def _learn(self, w: Watched, verb: str, error: CloudError | None, op: OperationState) -> None:
        """An operation ended: how long it took (the API's own createTime to endTime, not when
        a poll happened to see it: that would only ever grow) is what the next one of its
        zone and type most likely takes. For a create, a stockout's; a success ends the
        history. For a delete, any that succeeded."""
        key = (w.zone, w.accelerator_type)
        took = op.duration_s
        if verb == "delete":
            if error is None and took is not None:
                self._deleting_took.setdefault(key, deque(maxlen=RECENT)).append(took)
        elif verb != "create":
            return
        elif error is not None and error.kind is ErrorKind.CAPACITY and took is not None:
            self._failing.setdefault(key, deque(maxlen=RECENT)).append(took)
        elif error is None:
            self._failing.pop(key, None)  # capacity is back: the history is over

    def _forget(self, name: str) -> None:
        """Stop watching `name`, and remember it so that a stale snapshot cannot revive it."""
        del self._watched[name]
        self._waits.release(name)
        if len(self._finished) == self._finished.maxlen:
            self._finished_set.discard(self._finished[0])
        self._finished.append(name)
        self._finished_set.add(name)


def _attempt(w: Watched, error: CloudError | None, latency: float) -> CreateAttemptRecord:
    """The create attempt a finished create operation (not a lost one) adds to the history."""
    return CreateAttemptRecord(
        fleet=w.fleet,
        slot=w.slot,
        zone=w.zone,
        accelerator_type=w.accelerator_type,
        started_at=w.started_at,
        outcome="ok" if error is None else error.kind.value,
        latency_s=round(latency, 3),
        message=error.message if error is not None else None,
        incarnation_id=w.incarnation_id,
    )


def _outcome_text(
    w: Watched, verb: str, error: CloudError | None, op: OperationState | None
) -> str:
    if op is None:
        return f"{w.node_name}: {verb} operation no longer known to the API"
    if error is None:
        return f"{w.node_name}: {verb} operation succeeded"
    return f"{w.node_name}: {verb} operation failed: {error.kind.value}: {error.message}"
