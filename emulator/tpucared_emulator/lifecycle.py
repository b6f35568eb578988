"""The emulated cloud's records, and every transition they go through (requests: state.py).

`CloudLifecycle` owns what the emulated cloud holds: nodes (indexed per parent for paging),
operations, capacity limits and holdings, worker addresses, the timer heap and the host events
not yet handed over. Its transitions are shared by the v2 API, the control API and the timers;
`EmulatorState` (state.py) validates each request and then calls them. Time comes from an
injected `Clock`; nothing here sleeps. Work that happens later (a node becoming READY, a delete
completing, a queued resource timing out) is a timer in one heap, fired by `advance()`: the
server's driver calls it when the next timer is due, and every request calls it first, so reads
are always current. Creating a node costs one heap push, whatever the fleet size.

Effects on simulated worker hosts are queued as `HostEvent`s (start on READY, stop when a node
stops being usable) and drained by the driver, which awaits the `WorkerHosts` hook.

Node lifecycle (emulator side; `gone` = removed from the state):
    CREATING -> READY                 after create_seconds (capacity was available)
    CREATING -> gone                  after create_seconds, operation error 8 (no capacity)
    CREATING|READY|STOP* -> PREEMPTED | TERMINATED    control API, or spot/preemptible timers
    READY -> READY (UNHEALTHY_MAINTENANCE)            control API :unhealthy
    READY -> down for host maintenance -> READY | TERMINATED   maintenance_tpu.py ("maintenance"
                                      timers, keyed "phase|node" with the maintenance's serial)
    READY -> STOPPING -> STOPPED -> STARTING -> READY nodes.stop / nodes.start (on-demand only)
    any but DELETING -> DELETING -> gone              nodes.delete, after delete_seconds
    any -> gone                                       control API :vanish
PREEMPTED and TERMINATED nodes stay listed and hold capacity until deleted.
"""

from __future__ import annotations

import heapq
import random
import secrets
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

import structlog

from tpucared_emulator import errors
from tpucared_emulator.clock import Clock, SystemClock
from tpucared_emulator.errors import ApiError
from tpucared_emulator.options import EmulatorOptions
from tpucared_emulator.paging import SortedNames
from tpucared_emulator.resources import TYPE_URL, Node, Operation
from tpucared_emulator.topology import AcceleratorShape
from tpucared_emulator.vm_hook import NoVms, VmBook
from tpucared_emulator.workers import LoopbackAllocator, Worker

log = structlog.get_logger(__name__)

# States from which a node may be preempted or terminated by the (simulated) service.
KILLABLE = frozenset({"CREATING", "READY", "STOPPING", "STOPPED", "STARTING", "RESTARTING"})

TimerKind = Literal[
    "node_created",
    "node_deleted",
    "node_stopped",
    "node_started",
    "node_expire",
    "node_notice_over",
    "maintenance",
    "qr_tick",
    "vm_tick",
]


@dataclass
class Timing:
    create_seconds: float
    delete_seconds: float
    queued_provision_seconds: float
    preemptible_max_seconds: float
    spot_mean_lifetime_seconds: float | None

    def update(self, changes: dict[str, Any]) -> None:
        for key, value in changes.items():
            if key not in self.__dataclass_fields__:
                raise errors.invalid_argument(f"unknown timing field {key!r}", field=key)
            if value is None and key == "spot_mean_lifetime_seconds":
                setattr(self, key, None)
                continue
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise errors.invalid_argument(f"{key} must be a number >= 0", field=key)
            setattr(self, key, float(value))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HostEvent:
    kind: Literal["start", "notice", "stop"]
    node: Node


class QueuedBook(Protocol):
    """What the transitions tell the queued resources (queued.py's `QueuedResources`, which
    builds on this module's primitives): the book is seen only through these calls."""

    def provision_waiting(self, now: float) -> None: ...

    def tick(self, name: str, generation: int, now: float) -> None: ...

    def node_ready(self, node: Node) -> None: ...

    def node_lost(self, node: Node) -> None: ...

    def node_removed(self, node: Node, now: float, initiator: str | None) -> None: ...


class MaintenanceTicks(Protocol):
    """maintenance_tpu.py's `TpuMaintenance`, as its timers see it."""

    def tick(self, phase: str, name: str, serial: int, due: float) -> None: ...


class CloudLifecycle:
    """The records of one emulated cloud and the transitions between them; `EmulatorState`
    (state.py) is the whole of it, with the requests on top."""

    # Made by `EmulatorState._init_data`: queued resources take the whole state.
    queued: QueuedBook
    # Host maintenance of nodes (maintenance_tpu.py), made there too: its timers' "phase|node".
    maintenance: MaintenanceTicks

    def __init__(self, options: EmulatorOptions | None = None, clock: Clock | None = None):
        self.options = options or EmulatorOptions()
        self.clock: Clock = clock or SystemClock()
        self.catalog = self.options.catalog()
        self.timing = Timing(
            create_seconds=self.options.create_seconds,
            delete_seconds=self.options.delete_seconds,
            queued_provision_seconds=self.options.queued_provision_seconds,
            preemptible_max_seconds=self.options.preemptible_max_seconds,
            spot_mean_lifetime_seconds=self.options.spot_mean_lifetime_seconds,
        )
        # Called whenever a timer or host event is added: the driver wakes up and re-plans.
        self.on_change: Callable[[], None] = lambda: None
        # Compute Engine instances: replaced by compute/book.py's ComputeBook when it attaches.
        self.vms: VmBook = NoVms()
        self._init_data()

    def _init_data(self) -> None:
        self._rng = random.Random(self.options.seed)
        self._nodes: dict[str, Node] = {}  # full name -> node
        self._node_index: dict[str, SortedNames] = {}  # parent -> node ids
        self._node_ops: dict[str, str] = {}  # node name -> operation in flight on it
        self._ops: OrderedDict[str, Operation] = OrderedDict()
        self._limits: dict[tuple[str, str], int] = dict(self.options.capacity)
        self._held: Counter[tuple[str, str]] = Counter()
        self._addresses = LoopbackAllocator()
        self._timers: list[tuple[float, int, TimerKind, str, int]] = []
        self._timer_seq = 0
        self._host_events: list[HostEvent] = []
        self._rescan = False  # capacity freed or grew: waiting QRs / flex VMs may now fit

    # -----------------------------------------------------------------------------------------
    # Time.

    def now(self) -> float:
        return self.clock.now()

    def schedule(self, delay: float, kind: TimerKind, key: str, generation: int) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (self.now() + delay, self._timer_seq, kind, key, generation))
        self.on_change()

    def next_due(self) -> float | None:
        """When `advance()` next has work to do (epoch seconds), or None."""
        if self._rescan:
            return self.now()
        return self._timers[0][0] if self._timers else None

    def advance(self) -> None:
        """Fire every timer that is due. Cheap when none is."""
        now = self.now()
        while self._timers and self._timers[0][0] <= now:
            due, _, kind, key, generation = heapq.heappop(self._timers)
            self._fire(kind, key, generation, due)
        if self._rescan:
            self._rescan = False
            self.queued.provision_waiting(now)
            self.vms.provision_waiting(now)  # flex-start VMs wait for capacity too

    def _fire(self, kind: TimerKind, key: str, generation: int, due: float) -> None:
        if kind == "qr_tick":
            self.queued.tick(key, generation, due)
            return
        if kind == "vm_tick":
            self.vms.tick(key, generation, due)
            return
        if kind == "maintenance":  # `generation` is the maintenance's serial, not the node's
            phase, _, name = key.partition("|")
            self.maintenance.tick(phase, name, generation, due)
            return
        node = self._nodes.get(key)
        if node is None or node.generation != generation:
            return  # the node changed since: this timer is stale
        if kind == "node_created":
            self._finish_create(node, due)
        elif kind == "node_deleted":
            self._remove_node(node, due, initiator="USER")
        elif kind == "node_stopped":
            self._set_state(node, "STOPPED")
            self._finish_node_op(node, due)
        elif kind == "node_started":
            self._become_ready(node, due)
            self._finish_node_op(node, due)
        elif kind in ("node_expire", "node_notice_over") and node.state in KILLABLE:
            self._kill(node, "PREEMPTED", due)

    def take_host_events(self) -> list[HostEvent]:
        events, self._host_events = self._host_events, []
        return events

    # -----------------------------------------------------------------------------------------
    # Zones.

    def check_zone(self, zone: str) -> None:
        if not self.catalog.has_zone(zone):
            raise errors.location_not_found(zone)

    # -----------------------------------------------------------------------------------------
    # Operations: the registry, and finishing a node's operation.

    def operation(self, name: str) -> Operation | None:
        return self._ops.get(name)

    def new_operation(self, parent: str, target: str, verb: str) -> Operation:
        now = self.now()
        name = f"{parent}/operations/operation-{int(now * 1000)}-{secrets.token_hex(8)}"
        op = Operation(name=name, target=target, verb=verb, create_time=now)
        self._ops[name] = op
        for _ in range(len(self._ops) - self.options.max_operations):
            oldest_name, oldest = next(iter(self._ops.items()))
            if oldest.done:
                del self._ops[oldest_name]
            else:  # still running: keep it, look at it again once it is the oldest again
                self._ops.move_to_end(oldest_name)
        return op

    def _finish_node_op(self, node: Node, now: float, error: dict[str, Any] | None = None) -> None:
        op_name = self._node_ops.pop(node.name, None)
        op = self._ops.get(op_name) if op_name else None
        if op is None:
            return
        if op.verb == "delete" and error is None:
            op.finish(now)
        else:
            op.finish(now, response=self._node_response(node), error=error)

    def _node_response(self, node: Node) -> dict[str, Any]:
        return {"@type": TYPE_URL + "Node", **node.to_json()}

    # -----------------------------------------------------------------------------------------
    # Node transitions (shared by the API, the control API and the timers).

    def spawn_node(
        self, project: str, zone: str, node_id: str, spec: dict[str, Any], shape: AcceleratorShape
    ) -> Node:
        workers = [Worker(i, self._addresses.allocate()) for i in range(shape.workers)]
        node = Node(
            project=project,
            zone=zone,
            node_id=node_id,
            spec=spec,
            shape=shape,
            uid=self._rng.getrandbits(63) or 1,  # 0 would render as an unset id
            create_time=self.now(),
            workers=workers,
        )
        self._nodes[node.name] = node
        self._node_index.setdefault(node.parent, SortedNames()).add(node_id)
        return node

    def _set_state(self, node: Node, state: str, *, health: str | None = None) -> None:
        node.state = state
        node.health = health
        node.health_description = None
        node.bump()

    def _finish_create(self, node: Node, now: float) -> None:
        if node.state != "CREATING":
            return
        if node.capacity_pending:
            node.capacity_pending = False
            if not self.take_capacity(node):
                node.doomed = self.no_capacity_error(node)
        if node.doomed is not None:
            error = node.doomed
            self._finish_node_op(node, now, error=error)
            self._remove_node(node, now, initiator=None)
            return
        self._become_ready(node, now)
        self._finish_node_op(node, now)

    def _become_ready(self, node: Node, now: float) -> None:
        self._set_state(node, "READY", health="HEALTHY")
        self._hosts("start", node)
        self._schedule_expiry(node, now)
        self.queued.node_ready(node)

    def _schedule_expiry(self, node: Node, now: float) -> None:
        """Preemptible nodes die at 24 h; spot ones (optionally) at random."""
        delays = []
        if node.scheduling.get("preemptible"):
            delays.append(node.create_time + self.timing.preemptible_max_seconds - now)
        mean = self.timing.spot_mean_lifetime_seconds
        if mean and node.preemptible:
            delays.append(self._rng.expovariate(1.0 / mean))
        if delays:
            self.schedule(max(0.0, min(delays)), "node_expire", node.name, node.generation)

    def _hosts(self, kind: Literal["start", "stop"], node: Node) -> None:
        """Queue a hosts hook call. Invariant: a node's hosts run exactly while it is READY,
        so every edge into READY starts them and every edge out of READY stops them."""
        self._host_events.append(HostEvent(kind, node))
        self.on_change()

    def _kill(self, node: Node, state: str, now: float) -> None:
        """The service took the node away: PREEMPTED or TERMINATED, still listed."""
        was = node.state
        if was == "READY":
            self._hosts("stop", node)
        self._set_state(node, state)
        if was == "CREATING":
            reason = "preempted" if state == "PREEMPTED" else "terminated"
            # What GCP reports here is not documented; UNAVAILABLE makes clients look again.
            message = f"The TPU node was {reason} while it was being created. {errors.eid()}"
            failure = errors.ApiError("UNAVAILABLE", message)
            self._finish_node_op(node, now, error=failure.status())
        elif was in ("STOPPING", "STARTING"):
            self._finish_node_op(node, now, error=errors.internal().status())
        self.queued.node_lost(node)
        log.info("emulator.node.killed", node=node.name, state=state, was=was)

    def start_delete(self, node: Node, now: float) -> None:
        was = node.state
        if was == "CREATING":
            aborted = ApiError("ABORTED", "The node was deleted before its creation finished.")
            self._finish_node_op(node, now, error=aborted.status())
        elif was in ("STOPPING", "STARTING"):
            self._finish_node_op(node, now, error=errors.unable_to_queue().status())
        if was == "READY":
            self._hosts("stop", node)
        self._set_state(node, "DELETING")
        self.schedule(self.timing.delete_seconds, "node_deleted", node.name, node.generation)

    def _remove_node(self, node: Node, now: float, *, initiator: str | None) -> None:
        """The node is gone: free its name, addresses and capacity."""
        if node.state == "READY":
            self._hosts("stop", node)  # vanished while running
        self._finish_node_op(node, now)
        del self._nodes[node.name]
        self._node_index[node.parent].discard(node.node_id)
        for worker in node.workers:
            self._addresses.release(worker.ip)
        node.bump()
        if node.doomed is None and not node.capacity_pending:
            self._held[(node.zone, node.accelerator_type)] -= 1
            self._rescan = True
            self.on_change()
        self.queued.node_removed(node, now, initiator)

    # -----------------------------------------------------------------------------------------
    # For the Compute Engine instances (compute/book.py): addresses, capacity, host events.

    def allocate_address(self, reserve: str | None = None) -> str:
        if reserve is not None:
            self._addresses.reserve(reserve)
            return reserve
        return self._addresses.allocate()

    def release_address(self, address: str) -> None:
        self._addresses.release(address)

    def hold_capacity(self, zone: str, name: str, count: int) -> None:
        """Take (count 1) or give back (-1) one unit of (zone, machine type) capacity."""
        self._held[(zone, name)] += count

    def host_event(self, kind: Literal["start", "notice", "stop"], node: Node) -> None:
        self._host_events.append(HostEvent(kind, node))
        self.on_change()

    # -----------------------------------------------------------------------------------------
    # Capacity.

    def has_capacity(self, zone: str, accelerator_type: str, count: int) -> bool:
        limit = self._limits.get((zone, accelerator_type))
        return limit is None or self._held[(zone, accelerator_type)] + count <= limit

    def no_capacity_error(self, node: Node) -> dict[str, Any]:
        """The operation error of a create that found no capacity (code 8, the real text)."""
        reserved = node.scheduling.get("reserved")
        failure = errors.insufficient_reserved_capacity() if reserved else None
        return (failure or errors.no_capacity(node.zone)).status()

    def take_capacity(self, node: Node) -> bool:
        if not self.has_capacity(node.zone, node.accelerator_type, 1):
            return False
        self._held[(node.zone, node.accelerator_type)] += 1
        return True

    def set_capacity(self, zone: str, accelerator_type: str, available: int | None) -> None:
        """The limit of (zone, accelerator type), or of (zone, TPU machine type) for Compute
        Engine instances: the names of the two never collide."""
        if self.catalog.is_machine_type(accelerator_type):
            if not self.catalog.offers_machine(zone, accelerator_type):
                raise errors.invalid_argument(
                    f"machine type {accelerator_type} is not offered in zone {zone}"
                )
        else:
            self.check_zone(zone)
            if not self.catalog.offers(zone, accelerator_type):
                raise errors.unknown_accelerator(accelerator_type, zone)
        if available is None:
            self._limits.pop((zone, accelerator_type), None)
        else:
            self._limits[(zone, accelerator_type)] = available
        self._rescan = True
        self.on_change()

    def capacity(self) -> list[dict[str, Any]]:
        keys = set(self._limits) | {k for k, v in self._held.items() if v}
        return [
            {
                "zone": zone,
                # A machine type's entry says so: `PUT /_emulator/v1/capacity` took it as one.
                (
                    "machine_type" if self.catalog.is_machine_type(name) else "accelerator_type"
                ): name,
                "available": self._limits.get((zone, name)),
                "in_use": self._held[(zone, name)],
            }
            for zone, name in sorted(keys)
        ]

    # -----------------------------------------------------------------------------------------
    # The whole state: listing, snapshots, reset.

    def all_nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def node(self, name: str) -> Node | None:
        """The node of that full resource name, if it exists."""
        return self._nodes.get(name)

    def adopt(self, node: Node) -> None:
        """Take in a node restored from a snapshot: index it, hold its capacity and addresses,
        and resume whatever transition it was in."""
        if node.name in self._nodes:
            raise errors.already_exists(node.name)
        self._nodes[node.name] = node
        self._node_index.setdefault(node.parent, SortedNames()).add(node.node_id)
        for worker in node.workers:
            self._addresses.reserve(worker.ip)
        if node.doomed is None and not node.capacity_pending:
            self._held[(node.zone, node.accelerator_type)] += 1
        resume: dict[str, tuple[float, TimerKind]] = {
            "CREATING": (self.timing.create_seconds, "node_created"),
            "STARTING": (self.timing.create_seconds, "node_started"),
            "DELETING": (self.timing.delete_seconds, "node_deleted"),
            "STOPPING": (self.timing.delete_seconds, "node_stopped"),
        }
        if node.state in resume:
            delay, kind = resume[node.state]
            self.schedule(delay, kind, node.name, node.generation)
        elif node.state == "READY":
            self._hosts("start", node)
            self._schedule_expiry(node, self.now())

    def reset(self) -> None:
        """Forget everything (control API). Running hosts are told to stop."""
        self.vms.reset()
        for node in self._nodes.values():
            if node.state == "READY":
                self._host_events.append(HostEvent("stop", node))
        events = self._host_events
        self._init_data()
        self._host_events = events
        self.on_change()
