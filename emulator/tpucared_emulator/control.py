"""The emulator's own control API under /_emulator/v1: what the cloud does to you, on demand.

Contract (README.md, "The emulator"):
    POST   /_emulator/v1/projects/{p}/locations/{zone}/nodes/{id}:preempt
           (also :terminate, :vanish, :unhealthy, :heal)         -> the node (internal view)
    POST   .../nodes/{id}:schedule-maintenance {"start_in_seconds": S, "duration_seconds": D,
           "type": "SCHEDULED", "can_reschedule": B}: a host-maintenance window in
           `upcomingMaintenance` and the workers' `instance/upcoming-maintenance`
           (maintenance.py), which then happens (maintenance_tpu.py: the notice in
           `instance/maintenance-event`, the node down at S, back after D)  -> the node
    POST   .../nodes/{id}:wedge {"worker": i}   (simulated SSH hosts only) leave worker i's TPU
           held: -> {"worker", "pid", "device", "device_pattern", "lockfile"} for cleanup_script
    POST   .../nodes/{id}/workers/{i}:hold-accelerator {"stubborn": false}  (simulated SSH
           hosts only) a process holds worker i's accelerator device: killable (the pre-launch
           check frees it), or stubborn (it comes back when killed: a bad host) -> as :wedge
    GET    /_emulator/v1/capacity                                 -> {"capacity": [...]}
    PUT    /_emulator/v1/capacity {"zone", "accelerator_type", "available": N | null}
           (or "machine_type" instead of "accelerator_type": Compute Engine instances)
    POST   /_emulator/v1/projects/{p}/zones/{z}/instances/{name}:preempt (also :terminate,
           :vanish), GET /_emulator/v1/instances: Compute Engine VMs (compute/control.py)
    GET|PUT|DELETE /_emulator/v1/faults                           (see faults.py)
           kinds: unavailable, internal, deadline, quota, rate_limited, conflict, permission,
           drop, and malformed: an answer nobody should act on (hostile.py), per its "mode":
             not_json        200, an HTML page
             deep_json       200, ~10 KB of JSON nested 2,500 deep (json.loads: RecursionError)
             error_envelope  200 carrying {"error": {"code": 503, ...}}
             redirect        302, Location on another host (http://127.0.0.2:9/v2/...)
             labels_list     node lists: each node's labels as ["k=v", ...]
             state           node lists: each node's state replaced by "value" (any JSON)
             duplicate       node lists: the first node listed twice, the copy PREEMPTED
             endless_pages   lists: the first page, a fresh nextPageToken every time, forever
             slow_headers    nothing for "delay_s" seconds, then the real answer
           e.g. {"script": [{"kind": "malformed", "mode": "state", "value": 99}]}, or random:
           {"error_rate": 1, "kinds": ["malformed"], "mode": "slow_headers", "delay_s": 5};
           an unknown mode, or a state without value / slow_headers without delay_s, is 400
           INVALID_ARGUMENT naming the field ("mode", "script[0].mode", ...)
    GET|PUT /_emulator/v1/timing {"create_seconds", "delete_seconds", "queued_provision_seconds",
                                  "preemptible_max_seconds", "spot_mean_lifetime_seconds"}
    GET    /_emulator/v1/requests[?since=epoch]  -> [{method, path, query, status, time, fault}]
    DELETE /_emulator/v1/requests
    GET    /_emulator/v1/nodes                   -> {"nodes": [internal view incl. worker IPs]}
    POST   /_emulator/v1/reset                   -> forget all nodes, operations, queued
                                                    resources, capacity limits, faults, log
Never subject to fault injection or the request log.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tpucared_emulator import errors
from tpucared_emulator.control_body import json_object
from tpucared_emulator.faults import FaultInjector
from tpucared_emulator.host_hook import NoWorkerHosts, WorkerHosts
from tpucared_emulator.hosts import SshWorkerHosts
from tpucared_emulator.requestlog import RequestLog
from tpucared_emulator.state import EmulatorState

PREFIX = "/_emulator/v1"


class ControlApi:
    def __init__(
        self,
        state: EmulatorState,
        faults: FaultInjector,
        requests: RequestLog,
        hosts: WorkerHosts | None = None,
    ):
        self.state = state
        self.faults = faults
        self.requests = requests
        self.hosts = hosts or NoWorkerHosts()

    def add_routes(self, app: web.Application) -> None:
        nodes = PREFIX + "/projects/{project}/locations/{zone}/nodes/{node_action}"
        app.router.add_post(nodes, self.node_action)
        app.router.add_post(PREFIX + "/projects/{project}/locations/{zone}/nodes/{node}"
                            "/workers/{worker_action}", self.worker_action)  # fmt: skip
        app.router.add_get(PREFIX + "/nodes", self.list_nodes)
        app.router.add_get(PREFIX + "/capacity", self.get_capacity)
        app.router.add_put(PREFIX + "/capacity", self.put_capacity)
        app.router.add_get(PREFIX + "/faults", self.get_faults)
        app.router.add_put(PREFIX + "/faults", self.put_faults)
        app.router.add_delete(PREFIX + "/faults", self.delete_faults)
        app.router.add_get(PREFIX + "/timing", self.get_timing)
        app.router.add_put(PREFIX + "/timing", self.put_timing)
        app.router.add_get(PREFIX + "/requests", self.get_requests)
        app.router.add_delete(PREFIX + "/requests", self.delete_requests)
        app.router.add_post(PREFIX + "/reset", self.reset)

    async def node_action(self, request: web.Request) -> web.Response:
        project, zone = request.match_info["project"], request.match_info["zone"]
        node_id, _, action = request.match_info["node_action"].partition(":")
        if action == "vanish":
            self.state.vanish(project, zone, node_id)
            return web.json_response({})
        if action == "wedge":
            return web.json_response(await self._wedge(request, project, zone, node_id))
        if action == "schedule-maintenance":
            node = self.state.get_node(project, zone, node_id)
            self.state.maintenance.announce_window(node, await json_object(request))
            return web.json_response(node.internal_json())
        if action == "preempt" and request.can_read_body:
            notice = (await json_object(request)).get("notice_seconds")
            if notice is not None and (
                not isinstance(notice, int | float) or isinstance(notice, bool) or notice < 0
            ):
                raise errors.invalid_argument("notice_seconds must be a number >= 0")
            node = self.state.preempt(project, zone, node_id, notice_seconds=notice)
            return web.json_response(node.internal_json())
        actions = {
            "preempt": self.state.preempt,
            "terminate": self.state.terminate,
            "unhealthy": self.state.unhealthy,
            "heal": self.state.heal,
        }
        if action not in actions:
            raise errors.invalid_argument(
                f"unknown node action {action!r}; one of "
                f"{[*actions, 'vanish', 'wedge', 'schedule-maintenance']}"
            )
        node = actions[action](project, zone, node_id)
        return web.json_response(node.internal_json())

    async def worker_action(self, request: web.Request) -> web.Response:
        """`.../nodes/{node}/workers/{i}:hold-accelerator`: the one worker action."""
        index, _, action = request.match_info["worker_action"].partition(":")
        if action != "hold-accelerator" or not index.isdigit():
            raise errors.invalid_argument(f"unknown worker action {action!r}: hold-accelerator")
        body = await json_object(request) if request.can_read_body else {}
        stubborn = body.get("stubborn", False)
        if not isinstance(stubborn, bool):
            raise errors.invalid_argument("stubborn must be true or false")
        project, zone = request.match_info["project"], request.match_info["zone"]
        held = await self._hold(project, zone, request.match_info["node"], int(index), stubborn)
        return web.json_response(held)

    async def _wedge(
        self, request: web.Request, project: str, zone: str, node_id: str
    ) -> dict[str, Any]:
        body = await json_object(request)
        worker = body.get("worker", 0)
        if not isinstance(worker, int) or isinstance(worker, bool):
            raise errors.invalid_argument("worker must be an integer")
        return await self._hold(project, zone, node_id, worker, False)

    async def _hold(
        self, project: str, zone: str, node_id: str, worker: int, stubborn: bool
    ) -> dict[str, Any]:
        node = self.state.get_node(project, zone, node_id)
        if not isinstance(self.hosts, SshWorkerHosts):
            raise errors.failed_precondition("wedge needs the simulated SSH hosts (ssh_hosts)")
        if node.state != "READY" or not self.hosts.running(node):
            raise errors.failed_precondition(f"node is {node.state} without running hosts")
        try:
            return await self.hosts.wedge(node, worker, stubborn=stubborn)
        except IndexError as exc:
            raise errors.invalid_argument(str(exc)) from None

    async def list_nodes(self, _: web.Request) -> web.Response:
        return web.json_response({"nodes": [n.internal_json() for n in self.state.all_nodes()]})

    async def get_capacity(self, _: web.Request) -> web.Response:
        return web.json_response({"capacity": self.state.capacity()})

    async def put_capacity(self, request: web.Request) -> web.Response:
        body = await json_object(request)
        # One of accelerator_type (TPU API nodes) or machine_type (Compute Engine instances).
        kind = "machine_type" if "machine_type" in body else "accelerator_type"
        zone, name = body.get("zone"), body.get(kind)
        available = body.get("available")
        if not isinstance(zone, str) or not isinstance(name, str):
            raise errors.invalid_argument(
                "zone and accelerator_type (or machine_type) are required strings"
            )
        if kind == "machine_type" and not self.state.catalog.is_machine_type(name):
            raise errors.invalid_argument(f"{name!r} is not a TPU machine type")
        if kind == "accelerator_type" and self.state.catalog.is_machine_type(name):
            raise errors.invalid_argument(f"{name!r} is a machine type: say machine_type")
        if available is not None and (
            not isinstance(available, int) or isinstance(available, bool) or available < 0
        ):
            raise errors.invalid_argument("available must be an integer >= 0 or null")
        self.state.set_capacity(zone, name, available)
        entry = next(
            (c for c in self.state.capacity() if (c["zone"], c.get(kind)) == (zone, name)),
            {"zone": zone, kind: name, "available": None, "in_use": 0},
        )
        return web.json_response(entry)

    async def get_faults(self, _: web.Request) -> web.Response:
        return web.json_response(self.faults.to_json())

    async def put_faults(self, request: web.Request) -> web.Response:
        self.faults.configure(await json_object(request))
        return web.json_response(self.faults.to_json())

    async def delete_faults(self, _: web.Request) -> web.Response:
        self.faults.clear()
        return web.json_response(self.faults.to_json())

    async def get_timing(self, _: web.Request) -> web.Response:
        return web.json_response(self.state.timing.to_json())

    async def put_timing(self, request: web.Request) -> web.Response:
        self.state.timing.update(await json_object(request))
        return web.json_response(self.state.timing.to_json())

    async def get_requests(self, request: web.Request) -> web.Response:
        raw = request.query.get("since")
        try:
            since = float(raw) if raw else None
        except ValueError:
            raise errors.invalid_argument("since must be epoch seconds") from None
        return web.json_response(self.requests.entries(since))

    async def delete_requests(self, _: web.Request) -> web.Response:
        self.requests.clear()
        return web.json_response({})

    async def reset(self, _: web.Request) -> web.Response:
        self.state.reset()
        self.faults.clear()
        self.requests.clear()
        return web.json_response({})
