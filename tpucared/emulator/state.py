"""The emulated cloud: nodes, operations and capacity in memory (queued resources: queued.py).

`EmulatorState` is synchronous and owns every transition: the v2 handlers (api.py) and the
control handlers (control.py) call its methods, which validate, change state and raise
`ApiError` the way GCP does. Time comes from an injected `Clock`; nothing here sleeps. Work
that happens later (a node becoming READY, a delete completing, a queued resource timing out)
is a timer in one heap, fired by `advance()`: the server's driver calls it when the next timer
is due, and every request calls it first, so reads are always current. Creating a node costs
one heap push, whatever the fleet size.

Effects on simulated worker hosts are queued as `HostEvent`s (start on READY, stop when a node
stops being usable) and drained by the driver, which awaits the `WorkerHosts` hook.

Node lifecycle (emulator side; `gone` = removed from the state):
    CREATING -> READY                 after create_seconds (capacity was available)
    CREATING -> gone                  after create_seconds, operation error 8 (no capacity)
    CREATING|READY|STOP* -> PREEMPTED | TERMINATED    control API, or spot/preemptible timers
    READY -> READY (UNHEALTHY_MAINTENANCE)            control API :unhealthy
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
from typing import Any, Literal

import structlog

from tpucared.emulator import errors, validation
from tpucared.emulator.clock import Clock, SystemClock, rfc3339
from tpucared.emulator.errors import ApiError
from tpucared.emulator.options import EmulatorOptions
from tpucared.emulator.paging import Page, SortedNames, decode_token, encode_token, page_size
from tpucared.emulator.queued import QueuedResources
from tpucared.emulator.resources import TYPE_URL, Node, Operation
from tpucared.emulator.schema import normalize
from tpucared.emulator.topology import AcceleratorShape
from tpucared.emulator.workers import LoopbackAllocator, Worker

log = structlog.get_logger(__name__)

# States from which a node may be preempted or terminated by the (simulated) service.
_KILLABLE = frozenset({"CREATING", "READY", "STOPPING", "STOPPED", "STARTING", "RESTARTING"})
# States in which nodes.patch works; everything else is "update is not supported".
_UPDATABLE = frozenset({"READY", "STOPPED"})

TimerKind = Literal[
    "node_created", "node_deleted", "node_stopped", "node_started", "node_expire", "qr_tick"
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
    kind: Literal["start", "stop"]
    node: Node


class EmulatorState:
    """One emulated cloud: every project and zone, shared by the v2 and control APIs."""

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
        self._rescan = False  # capacity freed or grew: waiting queued resources may now fit
        self.queued = QueuedResources(self)

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

    def _fire(self, kind: TimerKind, key: str, generation: int, due: float) -> None:
        if kind == "qr_tick":
            self.queued.tick(key, generation, due)
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
        elif kind == "node_expire" and node.state in _KILLABLE:
            self._kill(node, "PREEMPTED", due)

    def take_host_events(self) -> list[HostEvent]:
        events, self._host_events = self._host_events, []
        return events

    # -----------------------------------------------------------------------------------------
    # Locations, accelerator types, runtime versions.

    def check_zone(self, zone: str) -> None:
        if not self.catalog.has_zone(zone):
            raise errors.location_not_found(zone)

    def location(self, project: str, zone: str) -> dict[str, Any]:
        self.check_zone(zone)
        return {"name": f"projects/{project}/locations/{zone}", "locationId": zone}

    def locations(self, project: str) -> list[dict[str, Any]]:
        return [self.location(project, zone) for zone in self.catalog.zones()]

    def accelerator_type(self, project: str, zone: str, name: str) -> dict[str, Any]:
        self.check_zone(zone)
        resource = f"projects/{project}/locations/{zone}/acceleratorTypes/{name}"
        if not self.catalog.offers(zone, name):
            raise errors.not_found(resource)
        shape = validation.accelerator({"acceleratorType": name}, zone, self.catalog)
        return {"name": resource, "type": name, "acceleratorConfigs": [shape.config()]}

    def accelerator_types(self, project: str, zone: str) -> list[dict[str, Any]]:
        self.check_zone(zone)
        return [
            self.accelerator_type(project, zone, name)
            for name in self.catalog.accelerator_types(zone)
        ]

    def runtime_version(self, project: str, zone: str, version: str) -> dict[str, Any]:
        self.check_zone(zone)
        resource = f"projects/{project}/locations/{zone}/runtimeVersions/{version}"
        if version not in self.catalog.runtime_versions:
            raise errors.not_found(resource)
        return {"name": resource, "version": version}

    def runtime_versions(self, project: str, zone: str) -> list[dict[str, Any]]:
        return [self.runtime_version(project, zone, v) for v in self.catalog.runtime_versions]

    # -----------------------------------------------------------------------------------------
    # Nodes: the v2 API.

    def get_node(self, project: str, zone: str, node_id: str) -> Node:
        self.check_zone(zone)
        name = f"projects/{project}/locations/{zone}/nodes/{node_id}"
        node = self._nodes.get(name)
        if node is None:
            raise errors.not_found(name)
        return node

    def list_nodes(
        self, project: str, zone: str, raw_page_size: str | None, token: str | None
    ) -> Page:
        self.check_zone(zone)
        parent = f"projects/{project}/locations/{zone}"
        size = page_size(raw_page_size, self.options.default_page_size, self.options.max_page_size)
        last = decode_token(token, parent + "/nodes")
        index = self._node_index.get(parent, SortedNames())
        ids, more = index.after(last, size)
        items = [self._nodes[f"{parent}/nodes/{i}"].to_json() for i in ids]
        return Page(items, encode_token(parent + "/nodes", ids[-1]) if more else None)

    def create_node(self, project: str, zone: str, node_id: str | None, body: object) -> Operation:
        self.check_zone(zone)
        node_id = validation.node_id(node_id)
        spec = normalize(body, "Node", "node")
        validation.runtime_version(spec)
        shape = validation.accelerator(spec, zone, self.catalog)
        validation.labels(spec.get("labels", {}))
        name = f"projects/{project}/locations/{zone}/nodes/{node_id}"
        if name in self._nodes:
            raise errors.already_exists(name)
        node = self.spawn_node(project, zone, node_id, spec, shape)
        if not self.take_capacity(node):
            reserved = node.scheduling.get("reserved")
            failure = errors.insufficient_reserved_capacity() if reserved else None
            node.doomed = (failure or errors.no_capacity(zone)).status()
        op = self.new_operation(node.parent, node.name, "create")
        self._node_ops[node.name] = op.name
        self.schedule(self.timing.create_seconds, "node_created", node.name, node.generation)
        return op

    def delete_node(self, project: str, zone: str, node_id: str) -> Operation:
        node = self.get_node(project, zone, node_id)
        if node.state == "DELETING":
            raise errors.unable_to_queue()
        now = self.now()
        op = self.new_operation(node.parent, node.name, "delete")
        self.start_delete(node, now)
        self._node_ops[node.name] = op.name
        return op

    def update_node(
        self, project: str, zone: str, node_id: str, body: object, raw_mask: str | None
    ) -> Operation:
        node = self.get_node(project, zone, node_id)
        paths = validation.update_mask(raw_mask)
        spec = normalize(body, "Node", "node")
        if node.state not in _UPDATABLE:
            raise errors.bad_state("update", node.state)
        if "labels" in paths:
            validation.labels(spec.get("labels", {}))
        for path in paths:
            if path == "networkConfig.enableExternalIps":
                enabled = bool(spec.get("networkConfig", {}).get("enableExternalIps"))
                node.spec.setdefault("networkConfig", {})["enableExternalIps"] = enabled
            elif path in spec:
                node.spec[path] = spec[path]
            else:
                node.spec.pop(path, None)  # in the mask but absent from the body: cleared
        node.spec_rev += 1
        op = self.new_operation(node.parent, node.name, "update")
        op.finish(self.now(), response=self._node_response(node))
        return op

    def stop_node(self, project: str, zone: str, node_id: str) -> Operation:
        node = self.get_node(project, zone, node_id)
        if node.state != "READY":
            raise errors.bad_state("stop", node.state)
        if node.preemptible or len(node.workers) > 1:
            raise errors.bad_request("stop is only supported for single-host on-demand nodes")
        self._hosts("stop", node)
        self._set_state(node, "STOPPING", health=None)
        op = self.new_operation(node.parent, node.name, "stop")
        self._node_ops[node.name] = op.name
        self.schedule(self.timing.delete_seconds, "node_stopped", node.name, node.generation)
        return op

    def start_node(self, project: str, zone: str, node_id: str) -> Operation:
        node = self.get_node(project, zone, node_id)
        if node.state != "STOPPED":
            raise errors.bad_state("start", node.state)
        self._set_state(node, "STARTING")
        op = self.new_operation(node.parent, node.name, "start")
        self._node_ops[node.name] = op.name
        self.schedule(self.timing.create_seconds, "node_started", node.name, node.generation)
        return op

    def guest_attributes(
        self, project: str, zone: str, node_id: str, body: object
    ) -> list[dict[str, Any]]:
        node = self.get_node(project, zone, node_id)
        request = normalize(body or {}, "GetGuestAttributesRequest", "")
        query_path = request.get("queryPath", "")
        workers = node.workers
        if request.get("workerIds"):
            wanted = set()
            for raw in request["workerIds"]:
                if not raw.isdigit() or int(raw) >= len(node.workers):
                    raise errors.bad_request(f"invalid worker id {raw!r}")
                wanted.add(int(raw))
            workers = [w for w in node.workers if w.index in wanted]
        namespace, _, key = query_path.strip("/").partition("/")
        out = []
        for worker in workers:
            items = []
            if node.state != "CREATING":  # the guest agent publishes keys once booted
                for key_type, blob in worker.host_keys().items():
                    if namespace in ("", "hostkeys") and key in ("", key_type):
                        items.append({"namespace": "hostkeys", "key": key_type, "value": blob})
            out.append({"queryPath": query_path, "queryValue": {"items": items}})
        return out

    # -----------------------------------------------------------------------------------------
    # Operations.

    def operation(self, name: str) -> Operation | None:
        return self._ops.get(name)

    def get_operation(self, name: str) -> Operation:
        self.check_zone(_zone_of(name))
        op = self._ops.get(name)
        if op is None:
            raise errors.not_found(name)
        return op

    def list_operations(
        self, project: str, zone: str, raw_page_size: str | None, token: str | None
    ) -> Page:
        self.check_zone(zone)
        parent = f"projects/{project}/locations/{zone}"
        size = page_size(raw_page_size, self.options.default_page_size, self.options.max_page_size)
        names = sorted(n for n, op in self._ops.items() if op.parent == parent)
        index = SortedNames(names)
        chunk, more = index.after(decode_token(token, parent + "/operations"), size)
        items = [self._ops[n].to_json() for n in chunk]
        return Page(items, encode_token(parent + "/operations", chunk[-1]) if more else None)

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
        node.generation += 1

    def _finish_create(self, node: Node, now: float) -> None:
        if node.state != "CREATING":
            return
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
        node.generation += 1
        if node.doomed is None:
            self._held[(node.zone, node.accelerator_type)] -= 1
            self._rescan = True
            self.on_change()
        self.queued.node_removed(node, now, initiator)

    # -----------------------------------------------------------------------------------------
    # Capacity.

    def has_capacity(self, zone: str, accelerator_type: str, count: int) -> bool:
        limit = self._limits.get((zone, accelerator_type))
        return limit is None or self._held[(zone, accelerator_type)] + count <= limit

    def take_capacity(self, node: Node) -> bool:
        if not self.has_capacity(node.zone, node.accelerator_type, 1):
            return False
        self._held[(node.zone, node.accelerator_type)] += 1
        return True

    def set_capacity(self, zone: str, accelerator_type: str, available: int | None) -> None:
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
                "accelerator_type": accelerator_type,
                "available": self._limits.get((zone, accelerator_type)),
                "in_use": self._held[(zone, accelerator_type)],
            }
            for zone, accelerator_type in sorted(keys)
        ]

    # -----------------------------------------------------------------------------------------
    # Control API: what the cloud does to nodes on its own.

    def preempt(self, project: str, zone: str, node_id: str) -> Node:
        return self._control_kill(project, zone, node_id, "PREEMPTED")

    def terminate(self, project: str, zone: str, node_id: str) -> Node:
        return self._control_kill(project, zone, node_id, "TERMINATED")

    def _control_kill(self, project: str, zone: str, node_id: str, state: str) -> Node:
        node = self.get_node(project, zone, node_id)
        if node.state not in _KILLABLE:
            raise errors.failed_precondition(f"cannot {state.lower()} a node in state {node.state}")
        self._kill(node, state, self.now())
        return node

    def vanish(self, project: str, zone: str, node_id: str) -> None:
        node = self.get_node(project, zone, node_id)
        now = self.now()
        if node.state == "CREATING":
            self._finish_node_op(node, now, error=errors.internal().status())
        self._remove_node(node, now, initiator="SERVICE")
        log.info("emulator.node.vanished", node=node.name)

    def unhealthy(self, project: str, zone: str, node_id: str) -> Node:
        node = self.get_node(project, zone, node_id)
        if node.state != "READY":
            raise errors.failed_precondition(f"node is {node.state}, not READY")
        node.health = "UNHEALTHY_MAINTENANCE"
        node.health_description = f"The TPU had a maintenance event at {rfc3339(self.now())}."
        return node

    def heal(self, project: str, zone: str, node_id: str) -> Node:
        node = self.get_node(project, zone, node_id)
        if node.state != "READY":
            raise errors.failed_precondition(f"node is {node.state}, not READY")
        node.health, node.health_description = "HEALTHY", None
        return node

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
        if node.doomed is None:
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

    # -----------------------------------------------------------------------------------------
    # Whole-state operations.

    def reset(self) -> None:
        """Forget everything (control API). Running hosts are told to stop."""
        for node in self._nodes.values():
            if node.state == "READY":
                self._host_events.append(HostEvent("stop", node))
        events = self._host_events
        self._init_data()
        self._host_events = events
        self.on_change()


def _zone_of(name: str) -> str:
    parts = name.split("/")
    if len(parts) < 4 or parts[0] != "projects" or parts[2] != "locations":
        raise errors.invalid_argument(f"invalid resource name {name!r}")
    return parts[3]
