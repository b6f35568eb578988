"""The daemon's Prometheus metrics: the families, and `DaemonMetrics`, which the runtime feeds.

Every family lives in the `DaemonMetrics` instance's own `CollectorRegistry` (never the global
one), so tests and several daemons in one process do not share counters. docs/metrics.md lists
each metric with its type, labels and meaning. The runtime wires it with a few calls:

    metrics = DaemonMetrics()
    connect_clouds(..., on_request=metrics.api_request)   # every cloud API request
    # each tick, after executing the plan:
    metrics.observe_tick(seconds)              # only for a tick that completed
    await metrics.refresh(store, now)          # node gauges, goodput, ledger, event counters
    # where the executor writes a CreateAttemptRecord:
    metrics.record_create(attempt)

Counters count from the daemon's start (Prometheus handles the reset at a restart); the first
`refresh` starts reading the event log at its current end instead of replaying history.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from tpucared import __version__
from tpucared.core.ledger.cost import Prices
from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.records import CreateAttemptRecord, EventRecord, ZoneHealth
from tpucared.core.model.specs import location_name
from tpucared.inspect.lifecycle import (
    AttemptEnded,
    Latency,
    LatencyKind,
    LifecycleTracker,
    Lost,
    Preempted,
    RunEnded,
)
from tpucared.runtime.telemetry.ledger_series import LedgerSeries
from tpucared.runtime.telemetry.slot_series import SlotSeries
from tpucared.store import Store
from tpucared.store.snapshot import SlotKey, Snapshot

CONTENT_TYPE = CONTENT_TYPE_LATEST
EVENT_PAGE = 500  # events read per query when catching up on the log

# Phases in a fixed order, so `tpucared_nodes` always has a series per live phase (a zero is
# something an alert can compare with; a missing series is not).
_LIVE_PHASES = sorted(p.value for p in LIVE_PHASES)

_TICK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_API_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_DELETE_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
_RECOVERY_BUCKETS = (60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)


class DaemonMetrics:
    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        clock: Callable[[], float] = time.time,
        prices: Prices | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._clock = clock
        self._prices = prices  # `[prices]`: the ledger's dollars
        r = self.registry
        _gauge(r, "tpucared_build_info", "tpucared version", "version").labels(__version__).set(1)
        # Registered in this order, which is the order of the families in /metrics.
        self._register_fleet_families(r)
        self._register_tick_and_api_families(r)
        self._register_slot_time_families(r)
        self._lifecycle = LifecycleTracker()
        self._seen: Snapshot | None = None  # the snapshot the fleet gauges show
        self.last_event_id: int | None = None  # None until the first refresh

    def set_role(self, leader: bool, epoch: int | None) -> None:
        """The leader lease (runtime/leader.py): this daemon's role, the lease's epoch."""
        self.leader.set(1 if leader else 0)
        if epoch is not None:
            self.lease_epoch.set(epoch)

    def _register_fleet_families(self, r: CollectorRegistry) -> None:
        """Nodes, slots, workloads, creates and their latencies, by fleet."""
        self.nodes = _gauge(r, "tpucared_nodes", "Live node incarnations", "fleet", "phase")
        self.slots = _gauge(r, "tpucared_slots", "Slots that want a node", "fleet")
        self.running = _gauge(
            r, "tpucared_workloads_running", "Slots with a workload attempt running", "fleet"
        )
        self.preemptions = _counter(
            r, "tpucared_preemptions", "Nodes lost while serving (preempted, ...)", "fleet"
        )
        self.losses = _counter(
            r,
            "tpucared_losses",
            "Losses by cause: nodes (preempted, maintenance, ...) and crashed workload attempts",
            "fleet",
            "cause",
        )
        self.flex_runs_ended = _counter(
            r,
            "tpucared_flex_runs_ended",
            "Flex-start runs ended at their max_run_duration (not preemptions)",
            "fleet",
        )
        self.creates = _counter(
            r, "tpucared_create_attempts", "Create calls by outcome", "fleet", "zone", "outcome"
        )
        self.dead_to_delete = _histogram(
            r,
            "tpucared_dead_to_delete_seconds",
            "From dead to delete call",
            "fleet",
            buckets=_DELETE_BUCKETS,
        )
        self.recovery = _histogram(
            r,
            "tpucared_recovery_seconds",
            "From a lost node to the next READY",
            "fleet",
            buckets=_RECOVERY_BUCKETS,
        )
        self.workload_attempts = _counter(
            r, "tpucared_workload_attempts", "Workload attempts by outcome", "fleet", "outcome"
        )
        self.maintenance_start = _gauge(
            r,
            "tpucared_maintenance_window_start_seconds",
            "Start of the slot's next announced host-maintenance window (Unix seconds)",
            "fleet",
            "slot",
        )

    def _register_tick_and_api_families(self, r: CollectorRegistry) -> None:
        """The daemon's own pace: ticks, and its requests to the TPU API."""
        self.tick = _histogram(r, "tpucared_tick_seconds", "Completed ticks", buckets=_TICK_BUCKETS)
        self.last_tick = _gauge(
            r, "tpucared_last_tick_timestamp_seconds", "Unix time of the last completed tick"
        )
        self.leader = _gauge(r, "tpucared_leader", "1 while this daemon holds the leader lease")
        self.lease_epoch = _gauge(
            r, "tpucared_lease_epoch", "The lease's epoch at this daemon's last attempt"
        )
        self.api_requests = _counter(
            r, "tpucared_api_requests", "TPU API requests by HTTP status", "call", "status"
        )
        self.zone_failures = _gauge(
            r, "tpucared_zone_list_failures", "Consecutive failed lists of a zone", "zone"
        )
        self.zone_unreachable = _gauge(
            r, "tpucared_zone_unreachable", "1 while a zone counts as unreachable", "zone"
        )
        self.zone_next_list = _gauge(
            r,
            "tpucared_zone_list_backoff_seconds",
            "Seconds until a failing zone is listed again (0: listed at the usual pace)",
            "zone",
        )
        self.api_seconds = _histogram(
            r,
            "tpucared_api_request_seconds",
            "TPU API request duration",
            "call",
            buckets=_API_BUCKETS,
        )

    def _register_slot_time_families(self, r: CollectorRegistry) -> None:
        """Goodput: each slot's productive and wall time (three families, built when scraped:
        slot_series.py says why)."""
        # The ledger per slot and category, kept incrementally (ledger_series.py); before
        # the goodput families, which tests/metrics_reference.py swaps for the old ones.
        self.ledger = LedgerSeries(self._prices)
        r.register(self.ledger)
        self.slot_series = SlotSeries()
        r.register(self.slot_series)

    # -- what the runtime calls -----------------------------------------------------------------

    def observe_tick(self, seconds: float, *, at: datetime | None = None) -> None:
        """A reconcile tick completed in `seconds` (at `at`, default the clock)."""
        self.tick.observe(seconds)
        self.last_tick.set(at.timestamp() if at is not None else self._clock())

    def api_request(self, call: str, status: str, seconds: float) -> None:
        """The clouds' `on_request` hook (runtime/clouds.py): (call, status, seconds)."""
        self.api_requests.labels(call, status).inc()
        self.api_seconds.labels(call).observe(seconds)

    def set_zones(
        self,
        zones: Iterable[tuple[str, str]],
        health: Mapping[tuple[str, str], ZoneHealth],
        now: datetime | None = None,
    ) -> None:
        """The list health of the (project, zone)s the configured fleets list (and only
        those: a zone an older config listed is not reported). A zone never failed reads 0.
        The label is the zone, `project/zone` for a fleet in another project than ours."""
        self.zone_failures.clear()
        self.zone_unreachable.clear()
        self.zone_next_list.clear()
        for where in sorted(set(zones)):
            h = health.get(where)
            label = location_name(*where)
            self.zone_failures.labels(label).set(0 if h is None else h.failures)
            self.zone_unreachable.labels(label).set(1 if h is not None and h.unreachable else 0)
            wait = 0.0
            if h is not None and h.failing and h.next_list_at is not None and now is not None:
                wait = max(0.0, (h.next_list_at - now).total_seconds())
            self.zone_next_list.labels(label).set(round(wait, 3))

    def record_create(self, attempt: CreateAttemptRecord) -> None:
        self.creates.labels(attempt.fleet, attempt.zone, attempt.outcome).inc()

    async def refresh(self, store: Store, now: datetime) -> None:
        """Read a snapshot and the events since the last refresh in one consistent view,
        and update everything derived from them."""
        events: list[EventRecord] = []
        async with store.read() as reader:
            snapshot = await reader.snapshot()
            if self.last_event_id is None:
                self.last_event_id = snapshot.last_event_id
            while True:
                page = await reader.events(since_id=self.last_event_id, limit=EVENT_PAGE)
                events += page
                if page:
                    self.last_event_id = page[-1].id
                if len(page) < EVENT_PAGE:
                    break
        self.observe_events(events)
        self.set_nodes(snapshot, now)
        await self.ledger.update(store, snapshot, now)

    # -- the parts of refresh, usable on their own ----------------------------------------------

    def observe_events(self, events: Iterable[EventRecord]) -> None:
        """Count what new events tell (each event once, in id order)."""
        for fact in self._lifecycle.feed(events):
            if isinstance(fact, Preempted):
                self.preemptions.labels(fact.fleet).inc(fact.count)
            elif isinstance(fact, RunEnded):
                self.flex_runs_ended.labels(fact.fleet).inc()
            elif isinstance(fact, Lost):
                self.losses.labels(fact.fleet, fact.cause).inc()
            elif isinstance(fact, AttemptEnded):
                self.workload_attempts.labels(fact.fleet, fact.outcome).inc()
            elif isinstance(fact, Latency):
                family = self.recovery if fact.kind is LatencyKind.RECOVERY else self.dead_to_delete
                family.labels(fact.fleet).observe(fact.seconds)

    def set_nodes(self, snapshot: Snapshot, now: datetime) -> set[SlotKey]:
        """Set the gauges from a snapshot and credit goodput time up to `now`. Returns the
        slots whose series changed other than by the passing of time (`SlotSeries.update`)."""
        if snapshot is not self._seen:  # the same snapshot (nothing written) shows the same
            self._set_fleet_gauges(snapshot)
            self._seen = snapshot
        return self.slot_series.update(snapshot, now)

    def _set_fleet_gauges(self, snapshot: Snapshot) -> None:
        """Nodes by phase, wanted slots and running workloads, per fleet. Counted here first,
        so the gauges take one `labels()` per series rather than one per node; the series
        come out in the order that per-node increments created them."""
        # collections.Counter counts in C; it keeps the order keys were first seen in.
        wanted = collections.Counter(s.fleet for s in snapshot.slots.values() if not s.done)
        seen = collections.Counter((k[0], n.phase) for k, n in snapshot.nodes.items())
        nodes: dict[tuple[str, str], int] = {}
        slots: dict[str, int] = {}
        running: dict[str, int] = {}
        for fleet in snapshot.fleets.values():
            for phase in _LIVE_PHASES:
                nodes[fleet.name, phase] = 0
            slots[fleet.name] = 0 if fleet.down else wanted[fleet.name]
            running[fleet.name] = 0
        for (fleet_name, node_phase), n in seen.items():
            key = (fleet_name, node_phase.value)
            nodes[key] = nodes.get(key, 0) + n
        for fleet_name, _ in snapshot.running:
            running[fleet_name] = running.get(fleet_name, 0) + 1
        self.nodes.clear()
        for (fleet_name, phase), n in nodes.items():
            self.nodes.labels(fleet_name, phase).set(n)
        for family, counts in ((self.slots, slots), (self.running, running)):
            family.clear()
            for fleet_name, n in counts.items():
                family.labels(fleet_name).set(n)
        self._set_maintenance(snapshot)

    def _set_maintenance(self, snapshot: Snapshot) -> None:
        """Each slot's next maintenance window start: the earliest of its live nodes' (a
        multislice slot has one per slice); no series for a slot without one."""
        starts: dict[tuple[str, int], float] = {}
        for (fleet_name, slot, _), node in snapshot.nodes.items():
            window = node.maintenance
            if window is None or window.start is None:
                continue
            at = window.start.timestamp()
            if (fleet_name, slot) not in starts or at < starts[fleet_name, slot]:
                starts[fleet_name, slot] = at
        self.maintenance_start.clear()
        for (fleet_name, slot), at in starts.items():
            self.maintenance_start.labels(fleet_name, str(slot)).set(at)

    def render(self) -> bytes:
        """The Prometheus text exposition (content type `CONTENT_TYPE`)."""
        return generate_latest(self.registry)


# Family constructors: one line per metric above instead of five.


def _gauge(r: CollectorRegistry, name: str, doc: str, *labels: str) -> Gauge:
    return Gauge(name, doc, labels, registry=r)


def _counter(r: CollectorRegistry, name: str, doc: str, *labels: str) -> Counter:
    return Counter(name, doc, labels, registry=r)


def _histogram(
    r: CollectorRegistry, name: str, doc: str, *labels: str, buckets: tuple[float, ...]
) -> Histogram:
    return Histogram(name, doc, labels, buckets=buckets, registry=r)
