"""The write workloads of bench/writerate.py, each through the real `Store` (and, for a tick's
writes, the real `Executor`): adoption, a quiet tick, a preemption storm, and a plain write
repeated by one or by 16 writers. Every transaction is timed by `TimedStore`; `Meter` turns
the transactions of one phase into rates, latencies and CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import func, select
from sqlalchemy.engine import URL

from bench import common
from bench.scale_fleet import ZONES
from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.vocab.actions import (
    Action,
    Adopt,
    CloudFacts,
    CreateNode,
    DeleteNode,
    OpenSlot,
    RecordCloud,
    RecordFleet,
    SlotUpdate,
    Transition,
)
from tpucared.core.vocab.plan import Plan
from tpucared.runtime.leader import LeaseKeeper
from tpucared.runtime.nodes.calls import MAX_DELETES, CloudCalls
from tpucared.runtime.nodes.executor import Executor
from tpucared.store import Store, Tx, make_engine
from tpucared.store.lease import Fence
from tpucared.store.models import EventRow, LeaderLeaseRow, NodeRow, SlotRow, ZoneHealthRow
from tpucared.store.snapshot import ZoneHealth

P = NodePhase
T0 = datetime(2026, 11, 26, tzinfo=UTC)
ACCELERATOR = "v5litepod-8"  # single host: one worker per node, as in bench/scale.py
PROJECT = "writerate-project"
LEASE_S = 15.0  # the default lease (config/values.py)


def fleets(size: int) -> list[tuple[str, str, int]]:
    """(fleet, zone, slots): `size` nodes in 4 fleets, one per zone, as bench/scale.py seeds."""
    base, extra = divmod(size, len(ZONES))
    return [(f"wr{i}", zone, base + (1 if i < extra else 0)) for i, zone in enumerate(ZONES)]


# ---------------------------------------------------------------------------------------------
# Timing every transaction


@dataclass(frozen=True)
class Sample:
    start: float  # Store.write() entered (before this process's writer queue)
    entered: float  # the block runs: queue, BEGIN and the lease fence done
    end: float  # committed
    fenced: bool  # False: a lease attempt (the keeper's), not a write of the workload


class TimedStore(Store):
    """A `Store` whose `write()` records when each transaction was asked for, began, committed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.samples: list[Sample] = []

    @classmethod
    def at(cls, url: URL | str) -> TimedStore:
        """`Store.open(url)`, timed (open() is typed to return a plain Store)."""
        return cls(make_engine(url))

    @asynccontextmanager
    async def write(self, *, fenced: bool = True) -> AsyncIterator[Tx]:
        start = time.perf_counter()
        async with super().write(fenced=fenced) as tx:
            entered = time.perf_counter()
            yield tx
        self.samples.append(Sample(start, entered, time.perf_counter(), fenced))


def server_cpu(pid: int | None) -> float:
    """CPU seconds of the PostgreSQL server's process tree so far (0 without a server)."""
    return common.tree_cpu_seconds([pid]) if pid else 0.0


class Meter:
    """One phase: its wall time, CPU (this process: the client, and SQLite itself; the
    PostgreSQL server's processes), load average, and the fenced transactions it committed."""

    def __init__(self, stores: Sequence[TimedStore], server_pid: int | None) -> None:
        self._stores = stores
        self._pid = server_pid
        self._marks = [len(s.samples) for s in stores]
        self._load = common.load_average()
        self._server = server_cpu(server_pid)  # walks /proc: before this process's CPU
        self._cpu = common.own_cpu_seconds()
        self._t = time.perf_counter()

    def stop(self, **extra: Any) -> dict[str, Any]:
        self.wall = time.perf_counter() - self._t
        self.client = common.own_cpu_seconds() - self._cpu
        self.server = server_cpu(self._pid) - self._server
        self.samples = [
            s
            for store, mark in zip(self._stores, self._marks, strict=True)
            for s in store.samples[mark:]
            if s.fenced
        ]
        return summary(self.samples, self.wall, self.client, self.server, self._load, **extra)

    @staticmethod
    def combine(meters: Sequence[Meter], **extra: Any) -> dict[str, Any]:
        """The summary of several stopped phases (e.g. ticks) as one: their sums."""
        return summary(
            [s for m in meters for s in m.samples],
            sum(m.wall for m in meters),
            sum(m.client for m in meters),
            sum(m.server for m in meters),
            meters[0]._load,
            **extra,
        )


def ms(samples: Sequence[float]) -> dict[str, Any]:
    """median / p99 / max of durations in seconds, as milliseconds (no raw samples)."""
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "median_ms": round(common.percentile(samples, 50) * 1000, 3),
        "p99_ms": round(common.percentile(samples, 99) * 1000, 3),
        "max_ms": round(max(samples) * 1000, 3),
    }


def summary(
    samples: Sequence[Sample],
    wall: float,
    client: float,
    server: float,
    load: list[float],
    **extra: Any,
) -> dict[str, Any]:
    n = len(samples)
    return {
        "wall_s": round(wall, 4),
        "transactions": n,
        "tx_per_s": round(n / wall, 2) if wall > 0 else None,
        # Asked for -> committed: what a writer waits, this process's queue included.
        "latency": ms([s.end - s.start for s in samples]),
        # The block and its commit only (after the queue, BEGIN and the lease fence).
        "block_and_commit": ms([s.end - s.entered for s in samples]),
        "client_cpu_ms_per_tx": round(client * 1000 / n, 3) if n else None,
        "server_cpu_ms_per_tx": round(server * 1000 / n, 3) if n else None,
        "client_cpu_s": round(client, 3),
        "server_cpu_s": round(server, 3),
        "load_average": {"start": load, "end": common.load_average()},
        **extra,
    }


# ---------------------------------------------------------------------------------------------
# A leader's store


@dataclass
class Leader:
    """A store that leads: the lease taken by a real `LeaseKeeper`, renewed every `lease/3`
    from its own task as the daemon's keeper does, so every write passes the fence."""

    store: TimedStore
    keeper: LeaseKeeper
    renewals: asyncio.Task[None]

    @classmethod
    async def open(cls, url: URL | str) -> Leader:
        store = TimedStore.at(url)
        keeper = LeaseKeeper(store, LEASE_S)
        await keeper.attempt()
        if keeper.epoch is None:
            await store.close()
            raise RuntimeError(f"could not take the lease on {url!r}")
        return cls(store, keeper, asyncio.create_task(_renew(keeper)))

    def fence(self) -> Fence:
        """Another store's fence at this leader's epoch (the 16-store pattern)."""
        fence = Fence()
        fence.epoch = self.keeper.epoch
        return fence

    async def close(self) -> None:
        self.renewals.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.renewals
        await self.store.close()


async def _renew(keeper: LeaseKeeper) -> None:
    while True:
        await asyncio.sleep(keeper.interval)
        await keeper.attempt()


# ---------------------------------------------------------------------------------------------
# The cloud calls of a storm: a stand-in for CloudCalls that writes what it writes


class DeleteOutcomes:
    """What `CloudCalls` does with a DeleteNode the executor hands it, minus the cloud: a
    background task per call, at most `MAX_DELETES` at once, that waits `latency_s` (the
    call) and records the accepted delete's operation in a transaction of its own
    (`record_outcome`, as `CloudCalls._delete_outcome`)."""

    def __init__(self, store: Store, latency_s: float) -> None:
        self._store = store
        self._latency = latency_s
        self._slots = asyncio.Semaphore(MAX_DELETES)
        self.tasks: list[asyncio.Task[None]] = []

    def busy(self, incarnation_id: int) -> bool:
        return False

    def name_busy(self, action: CreateNode | DeleteNode) -> bool:
        return False  # every node of a storm has its own name

    def reserve_delete(self, action: DeleteNode) -> None:
        pass  # every node of a storm has its own name: nothing to hold

    def unreserve_delete(self, action: DeleteNode) -> None:
        pass

    def start_create(self, action: CreateNode, inc: IncarnationRecord) -> None:
        raise AssertionError("a storm plans no create")

    def start_delete(self, action: DeleteNode, inc: IncarnationRecord) -> None:
        self.tasks.append(asyncio.create_task(self._delete(inc)))

    async def _delete(self, inc: IncarnationRecord) -> None:
        async with self._slots:
            await asyncio.sleep(self._latency)
            async with self._store.write() as tx:
                await tx.record_outcome(
                    inc.id,
                    P.DELETING,
                    T0,
                    operation=f"operations/delete-{inc.id}",
                    reason=f"{inc.node_name}: delete accepted",
                )

    async def wait(self) -> None:
        await asyncio.gather(*self.tasks)


def executor(store: Store, calls: DeleteOutcomes | None = None) -> Executor:
    # The executor's only uses of CloudCalls: busy(), name_busy(), reserve_delete(),
    # unreserve_delete(), start_create(), start_delete().
    # No budget: the benchmark measures a whole plan's writes, not one tick's share of them.
    return Executor(store, cast(CloudCalls, calls or DeleteOutcomes(store, 0.0)), budget=math.inf)


# ---------------------------------------------------------------------------------------------
# The plans


def endpoint(slot: int) -> tuple[WorkerEndpoint, ...]:
    return (
        WorkerEndpoint(
            index=0,
            internal_ip=f"10.{slot // 65536}.{slot // 256 % 256}.{slot % 256}",
            external_ip=None,
        ),
    )


def facts(slot: int, state: str, health: str | None, at: datetime) -> CloudFacts:
    return CloudFacts(
        cloud_state=state,
        cloud_state_since=at,
        health=health,
        unhealthy_since=at if health not in (None, "HEALTHY") else None,
        cloud_id=f"cloud-{slot}",
        create_time=T0,
        endpoints=endpoint(slot),
    )


def adoption_plan(size: int) -> Plan:
    """What a daemon plans on a fresh database over a fleet already running: each fleet
    recorded, its slots opened, every node adopted as READY with its cloud facts."""
    actions: list[Action] = []
    for fleet, _, slots in fleets(size):
        actions.append(RecordFleet(reason="", fleet=fleet, spec_hash=f"{fleet}-h", spec_json="{}"))
        actions += [OpenSlot(reason="", fleet=fleet, slot=i) for i in range(slots)]
    for fleet, zone, slots in fleets(size):
        actions += [
            Adopt(
                reason=f"{fleet}-{i}: adopted as READY",
                fleet=fleet,
                slot=i,
                node_name=f"{fleet}-{i}",
                zone=zone,
                accelerator_type=ACCELERATOR,
                phase=P.READY,
                queued_resource=None,
                cloud=facts(i, "READY", "HEALTHY", T0),
                project=PROJECT,
            )
            for i in range(slots)
        ]
    return Plan(now=T0, actions=tuple(actions))


def quiet_plan(nodes: Sequence[IncarnationRecord], tick: int, changed: int, now: datetime) -> Plan:
    """A steady tick where `changed` nodes' cloud facts moved (health now under maintenance):
    one RecordCloud each, a different set of nodes every tick."""
    start = tick * changed % max(len(nodes), 1)
    chosen = [nodes[(start + k) % len(nodes)] for k in range(changed)]
    return Plan(
        now=now,
        actions=tuple(
            RecordCloud(
                reason="cloud shows READY, health UNHEALTHY_MAINTENANCE",
                incarnation_id=inc.id,
                node_name=inc.node_name,
                expected=P.READY,
                cloud=facts(inc.slot, "READY", "UNHEALTHY_MAINTENANCE", now),
            )
            for inc in chosen
        ),
    )


def storm_plan(nodes: Sequence[IncarnationRecord], now: datetime) -> Plan:
    """Every node preempted in one tick, planned as the planner plans a death
    (core/nodes/step.py `die`): READY -> DEAD with the cloud facts and the slot's update
    (a preemption counted), then its DeleteNode; node after node, in that order."""
    actions: list[Action] = []
    for inc in nodes:
        actions.append(
            Transition(
                reason="preempted",
                incarnation_id=inc.id,
                node_name=inc.node_name,
                expected=P.READY,
                new=P.DEAD,
                end_reason="preempted",
                cloud=facts(inc.slot, "PREEMPTED", None, now),
                slot_update=SlotUpdate(
                    fleet=inc.fleet,
                    slot=inc.slot,
                    create_failures=0,
                    next_create_at=None,
                    next_zone=inc.zone,
                    last_error=None,
                    add_preemptions=1,
                ),
            )
        )
        actions.append(
            DeleteNode(
                reason="dead: delete it at once",
                incarnation_id=inc.id,
                fleet=inc.fleet,
                slot=inc.slot,
                node_name=inc.node_name,
                zone=inc.zone,
                expected=P.DEAD,
                queued_resource=None,
                project=PROJECT,
            )
        )
    return Plan(now=now, actions=tuple(actions))


async def live_nodes(store: Store) -> list[IncarnationRecord]:
    snapshot = await store.load_snapshot()
    return sorted(snapshot.nodes.values(), key=lambda inc: (inc.fleet, inc.slot))


async def zone_health(store: Store, tick: int, now: datetime) -> None:
    """One zone's health row changed this tick, written as the reconciler writes it."""
    zone = ZONES[tick % len(ZONES)]
    failing = tick % 2 == 0
    health = ZoneHealth(
        project=PROJECT,
        zone=zone,
        failures=1 if failing else 0,
        error_message="list timed out" if failing else None,
        failing_since=now if failing else None,
        last_ok_at=now - timedelta(seconds=10),
    )
    async with store.write() as tx:
        await tx.save_zone_health(health, now)


# ---------------------------------------------------------------------------------------------
# The repeated write of the concurrency patterns


async def writers(
    stores: Sequence[Store], nodes: Sequence[IncarnationRecord], count: int, tag: str
) -> None:
    """`count` transactions shared by one writer task per store of `stores` (the same store
    may come several times), each recording a delete operation on its own node (DELETING):
    a background call's outcome, as `CloudCalls._delete_outcome` writes it."""
    queue = iter(range(count))

    async def writer(store: Store) -> None:
        for k in queue:
            inc = nodes[k % len(nodes)]
            async with store.write() as tx:
                await tx.record_outcome(
                    inc.id,
                    P.DELETING,
                    T0,
                    operation=f"operations/{tag}-{k}",
                    reason=f"{inc.node_name}: delete accepted",
                )

    await asyncio.gather(*(writer(s) for s in stores))


# ---------------------------------------------------------------------------------------------
# What the database holds afterwards


async def contents(store: Store) -> dict[str, Any]:
    """Counts read back after the run, to hold against what the workloads wrote."""
    async with store.engine.connect() as conn:

        async def scalar(stmt: Any) -> Any:
            return (await conn.execute(stmt)).scalar_one()

        async def counts(column: Any) -> dict[Any, int]:
            rows = await conn.execute(select(column, func.count()).group_by(column))
            return {key: count for key, count in rows}

        phases = await counts(NodeRow.phase)
        kinds = await counts(EventRow.kind)
        return {
            "nodes": {str(getattr(k, "value", k)): v for k, v in sorted(phases.items())},
            "events": dict(sorted(kinds.items())),
            "slots": await scalar(select(func.count()).select_from(SlotRow)),
            "preemptions": int(
                await scalar(select(func.coalesce(func.sum(SlotRow.preemptions), 0)))
            ),
            "delete_calls": int(
                await scalar(select(func.coalesce(func.sum(NodeRow.delete_calls), 0)))
            ),
            "ended_preempted": await scalar(
                select(func.count()).select_from(NodeRow).where(NodeRow.end_reason == "preempted")
            ),
            "zone_health_rows": await scalar(select(func.count()).select_from(ZoneHealthRow)),
            "lease_epoch": await scalar(select(LeaderLeaseRow.epoch)),
        }


def expected_contents(
    size: int, quiet_ticks: int, changed: int, pattern_writes: int
) -> dict[str, Any]:
    """What `contents` must find after adoption, the quiet ticks, the storm and the patterns."""
    return {
        "nodes": {P.DELETING.value: size},
        "events": dict(
            sorted(
                {
                    "fleet.recorded": len(ZONES),
                    "leader_changed": 1,
                    "slot.opened": size,
                    "node.requested": size,
                    "node.ready": size,
                    "node.cloud": quiet_ticks * changed,
                    "node.dead": size,
                    "node.deleting": size,
                    "node.outcome": size + pattern_writes,
                }.items()
            )
        ),
        "slots": size,
        "preemptions": size,
        "delete_calls": size,
        "ended_preempted": size,
        "zone_health_rows": min(quiet_ticks, len(ZONES)),
        "lease_epoch": 1,
    }
