"""Host maintenance of TPU API nodes: what a window does to a node, and the v2alpha1 calls that
start one early (`nodes.performMaintenance`, `nodes.simulateMaintenanceEvent`).

Where it sits: `EmulatorState` owns one `TpuMaintenance` (`state.maintenance`); the control
API's `:schedule-maintenance` announces a window through it, api_v2alpha1.py calls `perform`
and `simulate`, and the lifecycle's "maintenance" timers come back to `tick`
(maintenance_run.py has the timeline: notice, down, up).

At the window's start (source: the v2alpha1 proto's `Node.State.TERMINATED`, "terminated due
to maintenance", and `Health.UNHEALTHY_MAINTENANCE`, "under maintenance ... will resume
running once rescheduled"; tpu/docs/prepare-for-maintenance "TPUs often recover automatically
from maintenance events"):
    spot / preemptible node   -> TERMINATED, stays listed (nothing brings it back)
    any other, per `tpu_maintenance_node` (which of these Google shows is not documented):
      "unhealthy" (default)   READY, health UNHEALTHY_MAINTENANCE, workers down; after the
                              duration READY/HEALTHY with workers booted again (disks kept)
      "repairing"             REPAIRING, workers down; then READY/HEALTHY
      "terminated"            TERMINATED, stays listed
The TPU API records no operation for it: Google documents none (the Compute Engine VMs under
a TPU node get system events, which the TPU API does not list).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from tpucared_emulator import errors
from tpucared_emulator.clock import rfc3339
from tpucared_emulator.maintenance import early_start_allowed, parse_body
from tpucared_emulator.maintenance_run import Timeline

if TYPE_CHECKING:
    from tpucared_emulator.lifecycle import CloudLifecycle
    from tpucared_emulator.resources import Node, Operation

log = structlog.get_logger(__name__)

MODES = ("unhealthy", "repairing", "terminated")


class TpuMaintenance(Timeline):
    def __init__(self, state: CloudLifecycle) -> None:
        super().__init__(state.options, state.clock)
        self.state = state

    # -----------------------------------------------------------------------------------------
    # The timeline's hooks.

    def host(self, name: str) -> Node | None:
        return self.state.node(name)

    def schedule(self, name: str, phase: str, delay: float, serial: int) -> None:
        self.state.schedule(delay, "maintenance", f"{phase}|{name}", serial)

    def notify(self, host: Node) -> None:
        self.state.host_event("notice", host)

    def default_duration(self) -> float:
        return self.state.timing.create_seconds  # as long as a node takes to come up

    def take_down(self, name: str, now: float) -> bool:
        node = self.state.node(name)
        if node is None or node.state != "READY":
            return False  # stopped, preempted or deleted meanwhile: nothing to terminate
        mode = self.options.tpu_maintenance_node
        # The lifecycle's own transitions (lifecycle.py): this module is part of the lifecycle.
        if node.preemptible or mode == "terminated":
            self.state._kill(node, "TERMINATED", now)
            return False
        self.state._hosts("stop", node)
        if mode == "repairing":
            self.state._set_state(node, "REPAIRING")
        else:
            node.health = "UNHEALTHY_MAINTENANCE"
            node.health_description = f"The TPU had a maintenance event at {rfc3339(now)}."
        log.info("emulator.node.maintenance", node=name, mode=mode)
        return True

    def bring_up(self, name: str, now: float) -> None:
        node = self.state.node(name)
        if node is None or node.state not in ("READY", "REPAIRING"):
            return  # deleted (or otherwise changed) while down
        if node.state == "REPAIRING":
            self.state._set_state(node, "READY", health="HEALTHY")
        else:
            node.health, node.health_description = "HEALTHY", None
        self.state._hosts("start", node)

    # -----------------------------------------------------------------------------------------
    # Requests.

    def announce_window(self, node: Node, body: dict[str, Any]) -> None:
        """The control API's `:schedule-maintenance` body (maintenance.parse_body)."""
        window = parse_body(body, self.clock, self.may_start_early(node))
        self.announce(node.name, node, window)

    @staticmethod
    def may_start_early(node: Node) -> bool:
        return early_start_allowed(node.shape.generation.prefix, node.shape.chips)

    def perform(self, project: str, zone: str, node_id: str) -> Operation:
        """nodes.performMaintenance (v2alpha1): the pending window starts now. Refused
        FAILED_PRECONDITION without one the API would let start early: no window, already
        ONGOING, canReschedule false, or a v5e/v6e slice under 2x4 (the wording is ours)."""
        node = self._node(project, zone, node_id)
        if not self.may_start_early(node):
            raise errors.failed_precondition(
                f"Maintenance cannot be started manually on accelerator type "
                f"{node.accelerator_type}: only v4, v5p, and v5e or v6e with the 2x4 topology "
                "or larger support it."
            )
        window = node.maintenance
        block = window.render() if window is not None else None
        if window is None or block is None or block["maintenanceStatus"] != "PENDING":
            raise errors.failed_precondition(f"Node {node.name} has no pending maintenance.")
        if not block["canReschedule"]:
            raise errors.failed_precondition(
                f"The pending maintenance of node {node.name} cannot be rescheduled."
            )
        if node.state != "READY":
            raise errors.bad_state("performMaintenance", node.state)
        self.start_now(node.name, node, window.type)
        return self._done_op(node, "performMaintenance")

    def simulate(self, project: str, zone: str, node_id: str, workers: list[str]) -> Operation:
        """nodes.simulateMaintenanceEvent (v2alpha1): a maintenance now, told only to "the
        first specified worker ID" (worker 0 when none is given), as the discovery document's
        `SimulateMaintenanceEventRequest.workerIds` says."""
        node = self._node(project, zone, node_id)
        first = workers[0] if workers else "0"
        if not first.isdigit() or int(first) >= len(node.workers):
            raise errors.bad_request(f"invalid worker id {first!r}")
        if node.state != "READY":
            raise errors.bad_state("simulateMaintenanceEvent", node.state)
        self.start_now(node.name, node, "UNSCHEDULED", frozenset({int(first)}))
        return self._done_op(node, "simulateMaintenanceEvent")

    def _done_op(self, node: Node, verb: str) -> Operation:
        op = self.state.new_operation(node.parent, node.name, verb)
        op.finish(self.now(), response=self.state._node_response(node))
        return op

    def now(self) -> float:
        return self.clock.now()

    def _node(self, project: str, zone: str, node_id: str) -> Node:
        """The node, or the v2 API's 404 (state.py `get_node`, which this module cannot
        import: the state owns this module)."""
        self.state.check_zone(zone)
        name = f"projects/{project}/locations/{zone}/nodes/{node_id}"
        node = self.state.node(name)
        if node is None:
            raise errors.not_found(name)
        return node
