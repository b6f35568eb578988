"""The emulated cloud as its APIs see it: `EmulatorState`, every project and zone at once.

`EmulatorState` is synchronous: the v2 handlers (api.py) and the control handlers (control.py)
call its methods, which validate a request, raise `ApiError` the way GCP does, and change the
cloud only through the transitions of `CloudLifecycle` (lifecycle.py), which owns the records
(nodes, operations, capacity), the timers and the node lifecycle. Queued resources: queued.py.
Here: locations, accelerator types and runtime versions; the v2 node and operation calls; and
what the control API makes the cloud do to a node on its own (preempt, terminate, vanish,
unhealthy, heal).
"""

from __future__ import annotations

from typing import Any

import structlog

from tpucared_emulator import errors, validation
from tpucared_emulator.clock import rfc3339
from tpucared_emulator.lifecycle import KILLABLE, CloudLifecycle, HostEvent, TimerKind, Timing
from tpucared_emulator.maintenance_tpu import TpuMaintenance
from tpucared_emulator.paging import Page, SortedNames, decode_token, encode_token, page_size
from tpucared_emulator.queued import QueuedResources
from tpucared_emulator.resources import Node, Operation
from tpucared_emulator.schema import normalize

# HostEvent, TimerKind and Timing live in lifecycle.py; importable from here as before.
__all__ = ["EmulatorState", "HostEvent", "TimerKind", "Timing"]

log = structlog.get_logger(__name__)

# States in which nodes.patch works; everything else is "update is not supported".
_UPDATABLE = frozenset({"READY", "STOPPED"})


class EmulatorState(CloudLifecycle):
    """One emulated cloud: every project and zone, shared by the v2 and control APIs."""

    # The whole book, for the API; the transitions below see only its `QueuedBook` calls.
    queued: QueuedResources
    maintenance: TpuMaintenance

    def _init_data(self) -> None:
        super()._init_data()
        self.queued = QueuedResources(self)
        self.maintenance = TpuMaintenance(self)

    # -----------------------------------------------------------------------------------------
    # Locations, accelerator types, runtime versions.

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
        if self.options.capacity_judged == "end":
            node.capacity_pending = True
        elif not self.take_capacity(node):
            node.doomed = self.no_capacity_error(node)
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
    # Operations: the v2 API.

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

    # -----------------------------------------------------------------------------------------
    # Control API: what the cloud does to nodes on its own.

    def preempt(
        self, project: str, zone: str, node_id: str, notice_seconds: float | None = None
    ) -> Node:
        """Preempt at once, or (`notice_seconds`) give the notice first: the node stays READY,
        its workers' `instance/preempted` turns TRUE, and it is preempted that much later."""
        if not notice_seconds:
            return self._control_kill(project, zone, node_id, "PREEMPTED")
        node = self.get_node(project, zone, node_id)
        if node.state != "READY":
            raise errors.failed_precondition(f"a notice needs a READY node, not {node.state}")
        if node.notice_at is None:
            node.notice_at = self.now()
            self._host_events.append(HostEvent("notice", node))
            self.schedule(notice_seconds, "node_notice_over", node.name, node.generation)
            log.info("emulator.node.notice", node=node.name, seconds=notice_seconds)
        return node

    def terminate(self, project: str, zone: str, node_id: str) -> Node:
        return self._control_kill(project, zone, node_id, "TERMINATED")

    def _control_kill(self, project: str, zone: str, node_id: str, state: str) -> Node:
        node = self.get_node(project, zone, node_id)
        if node.state not in KILLABLE:
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


def _zone_of(name: str) -> str:
    parts = name.split("/")
    if len(parts) < 4 or parts[0] != "projects" or parts[2] != "locations":
        raise errors.invalid_argument(f"invalid resource name {name!r}")
    return parts[3]
