"""One tick of the daemon: observe -> snapshot -> plan -> execute. No decisions here.

Order matters. The zones are listed first and the store is read after, so every record the
planner sees is at least as new as the lists: an intent recorded while the lists ran looks
like "not listed yet" (which the planner waits out), never like an unknown node to adopt.
The zones to list come from the config and the previous tick's live incarnations (a new
incarnation is always in a configured zone, or in a zone just listed).

The plan is computed by the pure `core.planning.tick.plan_tick` (the node planner plus the
workload planner, fed the probes of READY slices that ended since the last tick and are still
valid) with the notice keys reported by the previous plan (`reported`), so each condition is
told once per run. When the lists show serving nodes lost whose status does not say whether
they were preempted (Compute Engine: core/nodes/preemption.py `suspects`), their zones'
preemption records are read once (nodes/preemptions.py) into the observation, and the plan is
made once, with them. Node actions go to the executor; then the workload
actions (launch, stop, finish, done) go to the slots' background jobs (workload/jobs.py),
which also start the probes that are due. The tick never waits for SSH: a slow or hung
worker delays only its own slot, and a job that ends wakes the loop. Without workloads
(`tpucared down`) only the node planner runs. Operations recorded in the snapshot that
nobody polls yet are handed to the operation watcher (after a restart: the previous run's
creates and deletes).

A `quiet` tick (loop.py: woken only by a create backoff's end, or only by creates that failed
for lack of capacity) plans on the previous lists when core/planning/quiet.py allows it
(same zones, all succeeded, younger than `reuse_lists_within`, the poll interval).

After the lists, each zone's health (table `zone_health`: consecutive failed lists, the last
error, since when) is brought up to date in one small write transaction, only for the zones
whose row changed: a zone that keeps listing fine costs nothing. The `UNREACHABLE_AFTER`th
consecutive failure tells `zone.unreachable` (once per outage); the first list that succeeds
after it tells `zone.reachable`. A failing zone is listed again only after its backoff
(`ZoneHealth.next_list_at`, core/planning/zone_health.py: at most 30 s once it listed well
since the start, 5 minutes before that): until then a tick does not ask it and it is unknown
for that tick, as if its list had failed again, without counting as one. Its list then is a
probe (the observer's `list_terms`: one request when it fails at the first page, at most ten
times its last good list's pages and ten when the pages do not end).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType

import structlog

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import IncarnationRecord, ZoneHealth
from tpucared.core.model.specs import DEFAULT_PROJECT, ErrorKind, FleetSpec
from tpucared.core.nodes import preemption
from tpucared.core.planning.planner import plan as make_plan
from tpucared.core.planning.quiet import may_plan_on_last_lists
from tpucared.core.planning.tick import plan_tick
from tpucared.core.planning.zone_health import (
    UNREACHABLE_AFTER,
    health_details,
    listed_now,
    next_zone_health,
    when,
)
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.runtime.clock import Clock
from tpucared.runtime.nodes.executor import Execution, Executor
from tpucared.runtime.nodes.observer import (
    Location,
    Observer,
    Zones,
    by_location,
    summarize,
    zones_to_observe,
)
from tpucared.runtime.nodes.operations import OperationWatcher
from tpucared.runtime.nodes.preemptions import PreemptionReader
from tpucared.runtime.nodes.sweeps import Sweeper
from tpucared.runtime.workload.jobs import Dispatch, WorkloadJobs
from tpucared.runtime.workload.runner import WorkloadRunner
from tpucared.store import Snapshot, Store

log = structlog.get_logger(__name__)

# The reason of a tick due at a hold's or backoff's end: nothing the lists could show changed.
BACKOFF_OVER = "backoff over"

PlanFilter = Callable[[Plan], Plan]


@dataclass(frozen=True)
class Tick:
    number: int
    reason: str  # why this tick ran: "start", "poll", "backoff over", an operation, ...
    observations: tuple[ZoneObservation, ...]
    snapshot: Snapshot  # as read before the plan was carried out
    plan: Plan
    execution: Execution
    seconds: float
    workloads: Dispatch | None = None  # what became of the slots' jobs (None: no workloads)
    # Every zone listed so far, by zone, as recorded after this tick's lists.
    # By (project, zone), the project as the core names it (DEFAULT_PROJECT: gcp.project).
    zone_health: Mapping[Location, ZoneHealth] = field(default_factory=lambda: MappingProxyType({}))
    lists_reused: bool = False  # planned on the previous tick's lists (module docstring)
    # Where `seconds` went: listing (waiting for the API included), planning (the snapshot
    # read, the pure plan, and the preemption records of nodes it lost, in the rare tick that
    # lost one), carrying the plan out. Logged, so a slow tick says why.
    list_seconds: float = 0.0
    plan_seconds: float = 0.0
    read_seconds: float = 0.0  # the snapshot read alone (part of plan_seconds)

    @property
    def next_hold_lifts(self) -> datetime | None:
        """The earliest instant after this plan's `now` at which a hold lifts by itself (a
        create backoff ends): the loop plans again then rather than at its next poll."""
        times = [
            h.until for h in self.plan.holds if h.until is not None and h.until > self.plan.now
        ]
        return min(times, default=None)


class Reconciler:
    def __init__(
        self,
        *,
        specs: Sequence[FleetSpec],
        policy: Policy,
        owner: str,
        observer: Observer,
        store: Store,
        executor: Executor,
        watcher: OperationWatcher,
        clock: Clock,
        plan_filter: PlanFilter | None = None,
        workloads: WorkloadJobs | None = None,
        project: str | None = None,
        reuse_lists_within: float = 0.0,
        guard: Callable[[], None] | None = None,
        poll_interval: float = 0.0,
        preemptions: PreemptionReader | None = None,
        sweeper: Sweeper | None = None,
    ) -> None:
        self.specs = tuple(specs)
        self.policy = policy
        self.owner = owner
        self._observer = observer
        self._store = store
        self._executor = executor
        self._watcher = watcher
        self._clock = clock
        self._filter = plan_filter
        self._workloads = workloads
        self.reported: frozenset[str] = frozenset()
        self.ticks = 0
        self.last: Tick | None = None
        self._live: tuple[IncarnationRecord, ...] | None = None
        # What DEFAULT_PROJECT means (zone health is recorded per real project and zone).
        self.project = project if project is not None else observer.project
        self.zone_health: dict[Location, ZoneHealth] | None = None  # read from the store at first
        self._last_ok: dict[Location, datetime] = {}  # its last successful list (memory)
        self._reuse_within = reuse_lists_within
        self._poll = poll_interval  # a failing zone's list backoff starts at one poll
        # Raises LeaseLost unless this process leads (runtime/leader.py): checked before the
        # plan is carried out, so a leader that wakes from a pause acts on nothing it planned.
        self._guard = guard
        # The last lists: what was listed, what they showed, when (monotonic).
        self._listed: tuple[Zones, tuple[ZoneObservation, ...], float] | None = None
        self._preemptions = preemptions  # None: lost nodes' ends as the lists showed them
        self._sweeper = sweeper  # None: no shared resources swept (nodes/sweeps.py)

    async def tick(self, reason: str = "poll", *, quiet: bool | None = None) -> Tick:
        """One tick. `quiet` (default: the reason is BACKOFF_OVER): nothing since the last
        tick that the lists could show (module docstring)."""
        started = self._clock.monotonic()
        if self._live is None:
            self._live = await self._first_tick()
        zones = zones_to_observe(self.specs, self._live)
        quiet = reason == BACKOFF_OVER if quiet is None else quiet
        observations = self._reusable(quiet, zones, started)
        reused = observations is not None
        if observations is None:
            skip = await self._backing_off(zones)
            observations = await self._observer.observe(
                zones, self._clock.now(), skip=skip, health=self.zone_health
            )
            await self._record_zone_health(
                by_location(o for o in observations if (o.project, o.zone) not in skip)
            )
            self._listed = (zones, observations, started)
        listed = self._clock.monotonic()
        snapshot = await self._store.load_snapshot()
        read = self._clock.monotonic()
        self._live = tuple(snapshot.nodes.values())
        self._watcher.adopt(self._live)
        plan = await self._plan(observations, snapshot)
        if self._filter is not None:
            plan = self._filter(plan)
        self.reported = plan.standing
        self._executor.wake_when_deletes_end(plan)
        node_plan, workload_actions = WorkloadRunner.split(plan)
        planned = self._clock.monotonic()
        if self._guard is not None:
            self._guard()
        live = {i.id: i for i in self._live}
        execution = await self._executor.execute(node_plan, live)
        self._watcher.forget_deleted(execution.deleted())
        if self._sweeper is not None:  # its own tasks: never holds the tick
            self._sweeper.after_plan(node_plan, live, self.specs)
        dispatch = None
        if self._workloads is not None:
            # After the node actions are recorded, so a slot's launch cannot race its own
            # node's replacement (the launch re-reads its node; see workload/jobs.py).
            if self._guard is not None:
                self._guard()  # no SSH action from a process that stopped leading meanwhile
            dispatch = self._workloads.dispatch(snapshot, plan, workload_actions)
        self.ticks += 1
        tick = Tick(
            number=self.ticks,
            reason=reason,
            observations=observations,
            snapshot=snapshot,
            plan=plan,
            execution=execution,
            seconds=round(self._clock.monotonic() - started, 4),
            workloads=dispatch,
            zone_health=MappingProxyType(dict(self.zone_health or {})),
            lists_reused=reused,
            list_seconds=round(listed - started, 4),
            plan_seconds=round(planned - listed, 4),
            read_seconds=round(read - listed, 4),
        )
        self.last = tick
        _log_tick(tick)
        return tick

    async def _first_tick(self) -> tuple[IncarnationRecord, ...]:
        """The remembered nodes (which zones they live in); the start's sweep of shared
        resources (a crash may have left some unused)."""
        live = tuple((await self._store.load_snapshot()).nodes.values())
        if self._sweeper is not None:
            self._sweeper.at_start(self.specs, live)
        return live

    async def _plan(self, observations: tuple[ZoneObservation, ...], snapshot: Snapshot) -> Plan:
        """The pure plan (with the workload planner's when there are workloads), made with
        the preemption records of the nodes it finds lost (module docstring)."""
        now = self._clock.now()
        observations = await self._with_loss_records(observations, snapshot, now)
        if self._workloads is None:
            plan = make_plan(
                self.specs, observations, snapshot, now, self.policy, self.owner,
                reported=self.reported, deleting=self._executor.deletes_in_flight(),
                sent=self._executor.creates_sent(),
            )  # fmt: skip
        else:
            probes = self._workloads.collect(snapshot)
            plan = plan_tick(
                self.specs, observations, snapshot, probes, now, self.policy, self.owner,
                reported=self.reported, deleting=self._executor.deletes_in_flight(),
                sent=self._executor.creates_sent(),
            )  # fmt: skip
        return plan

    async def _with_loss_records(
        self, observations: tuple[ZoneObservation, ...], snapshot: Snapshot, now: datetime
    ) -> tuple[ZoneObservation, ...]:
        """The observations, with the cloud's records of the nodes this tick finds lost where
        the node states do not say why (core/nodes/preemption.py `suspects`): read once,
        only in a tick that has such a loss, and planned with, once."""
        if self._preemptions is None:
            return observations
        lost = preemption.suspects(
            self.specs, observations, snapshot.nodes.values(), now, self.policy.vanish_grace
        )
        if not lost:
            return observations
        return preemption.with_records(observations, await self._preemptions.read(lost))

    def _reusable(
        self, quiet: bool, zones: Zones, started: float
    ) -> tuple[ZoneObservation, ...] | None:
        """The previous lists, when this tick may plan on them (core/planning/quiet.py)."""
        if self._listed is None:
            return None
        listed, observations, at = self._listed
        reuse = may_plan_on_last_lists(
            quiet=quiet,
            zones=zones,
            last_zones=listed,
            last_lists=observations,
            age_s=started - at,
            within_s=self._reuse_within,
        )
        return observations if reuse else None

    async def _backing_off(self, zones: Zones) -> dict[Location, ZoneObservation]:
        """The locations whose list backoff is not over, each with what the tick says of it:
        unknown, the last failure's kind, and when it is asked next."""
        await self._load_zone_health()
        assert self.zone_health is not None
        now = self._clock.now()
        slack = timedelta(seconds=self._poll / 10)
        skip: dict[Location, ZoneObservation] = {}
        for where in zones.nodes:
            health = self.zone_health.get(where)
            if health is None or listed_now(health, now, slack):
                continue
            message = (
                f"not asked: backing off after {health.failures} failed lists "
                f"(next list at {when(health.next_list_at)}): {health.error_text}"
            )
            skip[where] = ZoneObservation(
                zone=where[1], observed_at=now, project=where[0],
                error=health.error_kind or ErrorKind.TRANSIENT, error_message=message,
            )  # fmt: skip
        return skip

    async def _load_zone_health(self) -> None:
        if self.zone_health is None:
            async with self._store.read() as r:
                rows = await r.zone_health()
            self.zone_health = {(self._key(z.project), z.zone): z for z in rows}

    def _key(self, project: str) -> str:
        """A recorded project as the core names it."""
        return DEFAULT_PROJECT if project == self.project else project

    async def _record_zone_health(self, observations: Iterable[ZoneObservation]) -> None:
        """Bring `zone_health` up to date: one write for the zones that changed, if any."""
        await self._load_zone_health()
        assert self.zone_health is not None
        now = self._clock.now()
        changed: list[tuple[ZoneHealth, tuple[str, str] | None]] = []
        for obs in observations:
            where = (obs.project, obs.zone)
            if obs.ok:
                self._last_ok[where] = obs.observed_at
            before = self.zone_health.get(where)
            after, event = next_zone_health(
                before, obs, obs.project or self.project, self._last_ok.get(where),
                UNREACHABLE_AFTER, poll_interval=self._poll,
                bounded=self._observer.bounded(where),
            )  # fmt: skip
            if after != before:
                self.zone_health[where] = after
                changed.append((after, event))
        if not changed:
            return
        async with self._store.write() as tx:
            for health, event in changed:
                await tx.save_zone_health(health, now)
                if event is not None:
                    kind, message = event
                    await tx.append_event(kind, message, now, details=health_details(health))
        for health, event in changed:
            if event is not None:
                log.warning(event[0], zone=health.zone, message=event[1])


def _log_tick(tick: Tick) -> None:
    kinds = Counter(a.kind for a in tick.plan.actions)
    fields = {
        "tick": tick.number,
        "reason": tick.reason,
        **summarize(tick.observations),
        **({"lists": "reused"} if tick.lists_reused else {}),
        "live": len(tick.snapshot.nodes),
        "actions": dict(sorted(kinds.items())),
        "skipped": tick.execution.skipped,
        "holds": len(tick.plan.holds),
        "seconds": tick.seconds,
        "list_seconds": tick.list_seconds,
        "plan_seconds": tick.plan_seconds,
        "read_seconds": tick.read_seconds,
    }
    if tick.workloads is not None:
        fields.update(tick.workloads.fields())
    lifts = tick.next_hold_lifts
    if lifts is not None:
        fields["next_hold_lifts"] = lifts.isoformat(timespec="milliseconds")
    # The canonical line: at info only when the tick did something.
    if tick.plan.actions:
        log.info("reconcile.tick", **fields)
    else:
        log.debug("reconcile.tick", **fields)
