"""Queued resources (queuedResources.*): requests for slices that wait for capacity.

Owned by `EmulatorState` (as `state.queued`) and built from the node primitives of its
`CloudLifecycle` (lifecycle.py), which sees this book only as its `QueuedBook`: a queued
resource that gets capacity spawns its nodes like a create would, and the state tells it when
one of its nodes becomes READY, is lost (preempted, terminated) or is removed.

State machine (QueuedResourceState.State):
    WAITING_FOR_RESOURCES -> PROVISIONING   capacity for every node at once, after at least
                                            queued_provision_seconds and validAfter
    WAITING_FOR_RESOURCES -> FAILED         validUntil passed first
    PROVISIONING -> ACTIVE                  every node READY
    PROVISIONING | ACTIVE -> SUSPENDED      a node preempted/terminated/vanished (SERVICE) or
                                            deleted (USER); the rest stay until deleted
    SUSPENDED | FAILED -> WAITING_FOR_RESOURCES   queuedResources.reset (old nodes deleted)
    any -> DELETING -> gone                 queuedResources.delete; with live nodes only with
                                            force=true, which deletes them first
Waiting requests are served first come, first served. When is an option, because Google does
not say (tpu/docs/queued-resources: a request waits "until there are sufficient free resources
to begin provisioning"; nothing on how often the queue is looked at, nor on who wins when a
plain nodes.create asks for the same capacity), `EmulatorOptions.queued_serve`:
    "at-once" (default)  whenever capacity frees or grows (and when a request's validAfter
                         comes): waiting requests take it before any later request is
                         answered, so a plain create never takes capacity a queued resource
                         was waiting for
    "scan"               at every multiple of `queued_scan_seconds` on the emulator's clock
                         (while anything waits): capacity that frees between two scans goes
                         to whichever plain create asks first (or, capacity judged at the
                         operation's end, ends first); what is left at the scan goes to the
                         queue. validUntil still fails a request the instant it passes.

Multislice: a nodeSpec with `multisliceParams {nodeCount: N, nodeIdPrefix}` instead of `nodeId`
asks for N nodes `{prefix}-0` .. `{prefix}-{N-1}` (the prefix defaults to the queued resource's
id; N must be > 1), each listed with `multisliceNode: true`. They are one request: capacity for
all N at once, ACTIVE when all are READY, SUSPENDED when any is lost, deleted (force) and
recreated (reset) together. Every node names its queued resource in `queuedResource`.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING, Any

import structlog

from tpucared_emulator import errors, validation
from tpucared_emulator.errors import ApiError
from tpucared_emulator.paging import Page, SortedNames, decode_token, encode_token, page_size
from tpucared_emulator.resources import TYPE_URL, Node, NodeRequest, Operation, QueuedResource
from tpucared_emulator.schema import normalize

if TYPE_CHECKING:
    from tpucared_emulator.lifecycle import CloudLifecycle

log = structlog.get_logger(__name__)

# States that own live nodes and react to losing them.
_HOLDING = frozenset({"PROVISIONING", "ACTIVE"})
# The key of the queue's scan timer ("scan" mode): never a queued resource's name, which starts
# with "projects/".
_SCAN = "queue-scan"


class QueuedResources:
    def __init__(self, state: CloudLifecycle) -> None:
        self.state = state
        self._qrs: dict[str, QueuedResource] = {}
        self._index: dict[str, SortedNames] = {}  # parent -> queued resource ids
        self._delete_ops: dict[str, str] = {}  # queued resource name -> its delete operation
        self._waiting: OrderedDict[str, QueuedResource] = OrderedDict()  # FIFO
        self._scan_due: float | None = None  # "scan" mode: when the next scan is, if one is set

    # -----------------------------------------------------------------------------------------
    # The v2 API.

    def create(self, project: str, zone: str, qr_id: str | None, body: object) -> Operation:
        state = self.state
        state.check_zone(zone)
        qr_id = validation.queued_resource_id(qr_id)
        spec = normalize(body, "QueuedResource", "queued_resource")
        parent = f"projects/{project}/locations/{zone}"
        name = f"{parent}/queuedResources/{qr_id}"
        if name in self._qrs:
            raise errors.already_exists(name)
        requests = self._node_requests(spec, parent, zone, qr_id)
        for request in requests:
            if state.node(f"{parent}/nodes/{request.node_id}") is not None:
                raise errors.already_exists(f"{parent}/nodes/{request.node_id}")
        now = state.now()
        try:
            after, until = validation.queueing_window(spec.get("queueingPolicy", {}), now)
        except ValueError as exc:
            raise errors.invalid_argument(str(exc), "queued_resource.queueing_policy") from None
        qr = QueuedResource(
            project=project,
            zone=zone,
            qr_id=qr_id,
            spec=spec,
            create_time=now,
            valid_after=max(after, now + state.timing.queued_provision_seconds),
            valid_until=until,
            requests=requests,
        )
        self._qrs[name] = qr
        self._index.setdefault(parent, SortedNames()).add(qr_id)
        self._wait(qr, now)
        # The request is accepted at once; provisioning is the queued resource's own state.
        op = state.new_operation(parent, name, "create")
        op.finish(now, response=_response(qr))
        return op

    def get(self, project: str, zone: str, qr_id: str) -> QueuedResource:
        self.state.check_zone(zone)
        name = f"projects/{project}/locations/{zone}/queuedResources/{qr_id}"
        qr = self._qrs.get(name)
        if qr is None:
            raise errors.not_found(name)
        return qr

    def list_page(
        self, project: str, zone: str, raw_page_size: str | None, token: str | None
    ) -> Page:
        self.state.check_zone(zone)
        options = self.state.options
        parent = f"projects/{project}/locations/{zone}"
        size = page_size(raw_page_size, options.default_page_size, options.max_page_size)
        scope = parent + "/queuedResources"
        index = self._index.get(parent, SortedNames())
        ids, more = index.after(decode_token(token, scope), size)
        items = [self._qrs[f"{scope}/{i}"].to_json() for i in ids]
        return Page(items, encode_token(scope, ids[-1]) if more else None)

    def delete(self, project: str, zone: str, qr_id: str, force: bool) -> Operation:
        state = self.state
        qr = self.get(project, zone, qr_id)
        if qr.state == "DELETING":
            raise errors.unable_to_queue()
        if qr.node_names and not force:
            raise errors.failed_precondition(
                f"Queued resource {qr.name} has nodes; delete them first or set force=true."
            )
        now = state.now()
        op = state.new_operation(qr.parent, qr.name, "delete")
        self._delete_ops[qr.name] = op.name
        self._waiting.pop(qr.name, None)
        self._set_state(qr, "DELETING", initiator="USER")
        for node in self._nodes(qr):
            if node.state != "DELETING":
                state.start_delete(node, now)
        if not qr.node_names:  # nothing to wait for but the delete itself
            state.schedule(state.timing.delete_seconds, "qr_tick", qr.name, qr.generation)
        return op

    def reset(self, project: str, zone: str, qr_id: str) -> Operation:
        state = self.state
        qr = self.get(project, zone, qr_id)
        if qr.state not in ("SUSPENDED", "FAILED"):
            raise errors.failed_precondition(
                f"Queued resource {qr.name} cannot be reset in state {qr.state}."
            )
        now = state.now()
        for node in self._nodes(qr):
            node.queued_resource = None  # the old slice no longer belongs to the request
            if node.state != "DELETING":
                state.start_delete(node, now)
        qr.node_names = []
        qr.failed_error = None
        qr.valid_after = now + state.timing.queued_provision_seconds
        qr.valid_until = None
        self._set_state(qr, "WAITING_FOR_RESOURCES")
        self._wait(qr, now)
        op = state.new_operation(qr.parent, qr.name, "reset")
        op.finish(now, response=_response(qr))
        return op

    # -----------------------------------------------------------------------------------------
    # What the state tells us.

    def node_ready(self, node: Node) -> None:
        qr = self._owner(node)
        if qr is None or qr.state != "PROVISIONING":
            return
        nodes = self._nodes(qr)
        if len(nodes) == len(qr.requests) and all(n.state == "READY" for n in nodes):
            self._set_state(qr, "ACTIVE")

    def node_lost(self, node: Node) -> None:
        """The service took one of the slices away (preempted, terminated)."""
        qr = self._owner(node)
        if qr is not None and qr.state in _HOLDING:
            self._set_state(qr, "SUSPENDED", initiator="SERVICE")

    def node_removed(self, node: Node, now: float, initiator: str | None) -> None:
        qr = self._owner(node)
        if qr is None:
            return
        qr.node_names.remove(node.name)
        if qr.state in _HOLDING and initiator:
            self._set_state(qr, "SUSPENDED", initiator=initiator)
        if qr.state == "DELETING" and not qr.node_names:
            self._drop(qr, now)

    def tick(self, name: str, generation: int, now: float) -> None:
        """A timer of ours fired: validAfter/validUntil reached, a delete is due, or a scan."""
        if name == _SCAN:
            self._scan_due = None
            self._serve(now, provision=True)
            self._schedule_scan(now)
            return
        qr = self._qrs.get(name)
        if qr is None or qr.generation != generation:
            return
        if qr.state == "DELETING" and not qr.node_names:
            self._drop(qr, now)
        elif qr.state == "WAITING_FOR_RESOURCES":
            self.provision_waiting(now)

    def provision_waiting(self, now: float) -> None:
        """Capacity freed or grew, or a waiting request's validAfter or validUntil came: serve
        the queue now ("at-once"), or only fail what expired and leave the rest to the next
        scan ("scan")."""
        at_once = self.state.options.queued_serve == "at-once"
        self._serve(now, provision=at_once)
        if not at_once:
            self._schedule_scan(now)

    def _serve(self, now: float, *, provision: bool) -> None:
        """Give capacity to waiting queued resources, first come first served (`provision`),
        after failing those whose validUntil passed."""
        state = self.state
        for qr in list(self._waiting.values()):
            if qr.valid_until is not None and now >= qr.valid_until:
                self._waiting.pop(qr.name)
                message = (
                    "The queued resource could not be provisioned before its valid-until "
                    f'time: there is no more capacity in the zone "{qr.zone}". {errors.eid()}'
                )
                qr.failed_error = ApiError("RESOURCE_EXHAUSTED", message).status()
                self._set_state(qr, "FAILED")
                continue
            if not provision or now < qr.valid_after:
                continue
            names = [f"{qr.parent}/nodes/{r.node_id}" for r in qr.requests]
            if any(state.node(name) is not None for name in names):
                continue  # an old node of the same name is still being deleted
            # All or nothing: capacity for every node (every slice of a multislice) at once.
            needed = Counter(r.shape.name for r in qr.requests)
            if not all(state.has_capacity(qr.zone, t, n) for t, n in needed.items()):
                continue
            self._waiting.pop(qr.name)
            self._set_state(qr, "PROVISIONING")
            for request in qr.requests:
                node = state.spawn_node(
                    qr.project, qr.zone, request.node_id, dict(request.spec), request.shape
                )
                node.queued_resource = qr.name
                node.multislice_node = request.multislice
                state.take_capacity(node)
                qr.node_names.append(node.name)
                state.schedule(
                    state.timing.create_seconds, "node_created", node.name, node.generation
                )
            log.info("emulator.qr.provisioning", qr=qr.name, nodes=len(qr.requests))

    # -----------------------------------------------------------------------------------------

    def _node_requests(
        self, spec: dict[str, Any], parent: str, zone: str, qr_id: str
    ) -> list[NodeRequest]:
        """Every node a queued resource asks for: a nodeSpec's `nodeId` names one node, its
        `multisliceParams` `nodeCount` of them (the schema refuses both: they are a oneof)."""
        out: list[NodeRequest] = []
        node_specs = spec.get("tpu", {}).get("nodeSpec", [])
        if not node_specs:
            raise errors.invalid_argument(
                "Field 'tpu.node_spec' is required.", "queued_resource.tpu.node_spec"
            )
        for i, node_spec in enumerate(node_specs):
            if node_spec.get("parent") != parent:
                raise errors.bad_request(
                    f"node_spec[{i}].parent must be {parent}, got {node_spec.get('parent')!r}"
                )
            node = dict(node_spec.get("node", {}))
            validation.runtime_version(node)
            shape = validation.accelerator(node, zone, self.state.catalog)
            validation.labels(node.get("labels", {}))
            if "spot" in spec and "schedulingConfig" not in node:
                node["schedulingConfig"] = {"spot": True}
            if "multisliceParams" in node_spec:
                ids = validation.multislice_node_ids(
                    node_spec["multisliceParams"], qr_id, f"node_spec[{i}]"
                )
                out.extend(NodeRequest(node_id, node, shape, True) for node_id in ids)
            elif "nodeId" in node_spec:
                node_id = validation.node_id(node_spec["nodeId"], "nodeSpec.nodeId")
                out.append(NodeRequest(node_id, node, shape, False))
            else:
                raise errors.bad_request(
                    f"node_spec[{i}] must set either node_id or multislice_params"
                )
        repeated = sorted(n for n, k in Counter(r.node_id for r in out).items() if k > 1)
        if repeated:
            raise errors.bad_request(f"node ids must be unique, {repeated} repeat")
        return out

    def _wait(self, qr: QueuedResource, now: float) -> None:
        self._waiting[qr.name] = qr
        state = self.state
        state.schedule(max(0.0, qr.valid_after - now), "qr_tick", qr.name, qr.generation)
        if qr.valid_until is not None:
            state.schedule(max(0.0, qr.valid_until - now), "qr_tick", qr.name, qr.generation)
        if state.options.queued_serve == "scan":
            self._schedule_scan(now)

    def _schedule_scan(self, now: float) -> None:
        """In "scan" mode: the next scan at the next multiple of queued_scan_seconds, while any
        request waits. On a grid, not counted from when capacity freed: the service's scans
        do not know when that was, so the wait is uniform over one period."""
        if not self._waiting or self._scan_due is not None:
            return
        period = self.state.options.queued_scan_seconds
        due = (math.floor(now / period) + 1) * period
        self._scan_due = due
        self.state.schedule(due - now, "qr_tick", _SCAN, 0)

    def _set_state(self, qr: QueuedResource, state: str, initiator: str | None = None) -> None:
        qr.state = state
        qr.state_initiator = initiator
        qr.bump()  # timers scheduled for the previous state are now stale

    def _drop(self, qr: QueuedResource, now: float) -> None:
        del self._qrs[qr.name]
        self._index[qr.parent].discard(qr.qr_id)
        op_name = self._delete_ops.pop(qr.name, None)
        op = self.state.operation(op_name) if op_name else None
        if op is not None:
            op.finish(now)

    def _nodes(self, qr: QueuedResource) -> list[Node]:
        return [n for n in map(self.state.node, qr.node_names) if n is not None]

    def _owner(self, node: Node) -> QueuedResource | None:
        if node.queued_resource is None:
            return None
        qr = self._qrs.get(node.queued_resource)
        return qr if qr is not None and node.name in qr.node_names else None


def _response(qr: QueuedResource) -> dict[str, Any]:
    return {"@type": TYPE_URL + "QueuedResource", **qr.to_json()}
