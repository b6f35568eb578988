"""Host maintenance of Compute Engine TPU VMs: a window's termination and restart, and
`instances.performMaintenance` / `instances.simulateMaintenanceEvent`.

Where it sits: compute/book.py's `ComputeBook` owns one `ComputeMaintenance`
(`book.maintenance`); compute/control.py's `:schedule-maintenance` announces a window through
it, compute/api.py routes the two API calls to `perform` and `simulate`, and the book's
"maintenance" timers come back to `tick` (maintenance_run.py has the timeline: notice, down,
up). The metadata key `instance/maintenance-event` is the VM host's (hosts/metadata.py).

At the window's start a TPU VM, which cannot live-migrate (validation.py: "Instances with TPUs
must terminate on host maintenance"), is terminated:
  - a DONE zone operation by `system` records it, operationType
    `compute_maintenance_op_type` (default `compute.instances.terminateOnHostMaintenance`:
    [3P] gcpdiag's TERMINATE_ON_HOST_MAINTENANCE_METHOD and audit-log filters; Google's
    viewing-compute-operations page says a host event that changes a VM's state creates an
    operation, without naming the type); its statusMessage is our wording;
  - RUNNING -> STOPPING -> TERMINATED (compute_stopping_seconds, as a preemption);
  - with `scheduling.automaticRestart` (by default true, "so an instance is automatically
    restarted if it is terminated by Compute Engine", compute_v1 `Scheduling`; spot and
    flex-start VMs cannot set it) it is restarted after the maintenance's duration:
    TERMINATED -> STAGING -> RUNNING, same id and disk; no operation is recorded for the
    restart (none documented). Without it, it stays TERMINATED.
  - a spot VM per `compute_spot_maintenance`: "preempted" (a preemption, recorded as
    `compute.instances.preempted`) or "host_maintenance" (the operation above, then its
    instanceTerminationAction; never restarted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

import structlog

from tpucared_emulator.compute import errors
from tpucared_emulator.compute.resources import Instance, ZoneOperation
from tpucared_emulator.maintenance import parse_body
from tpucared_emulator.maintenance_run import Timeline

if TYPE_CHECKING:
    from tpucared_emulator.options import EmulatorOptions
    from tpucared_emulator.resources import Node
    from tpucared_emulator.state import EmulatorState

log = structlog.get_logger(__name__)

# Invented: the statusMessage of the system operation (Google's text is not published).
STATUS_MESSAGE = "Instance was terminated for host maintenance."


class Book(Protocol):
    """What maintenance uses of compute/book.py's `ComputeBook` (which owns a
    `ComputeMaintenance`: typed here so that this module need not import book.py)."""

    state: EmulatorState
    options: EmulatorOptions
    instances: dict[str, Instance]

    def now(self) -> float: ...

    def instance(self, project: str, zone: str, name: str) -> Instance: ...

    def schedule(
        self, inst: Instance, step: Literal["stopped", "running"], delay: float
    ) -> None: ...

    def set_status(self, inst: Instance, status: str) -> None: ...

    def take_capacity(self, inst: Instance) -> bool: ...

    def release_capacity(self, inst: Instance) -> None: ...

    def preempt_now(self, inst: Instance) -> None: ...

    def new_operation(
        self,
        project: str,
        zone: str,
        operation_type: str,
        target: Instance,
        *,
        user: str = ...,
        request_id: str | None = None,
    ) -> ZoneOperation: ...

    def replayed(self, project: str, zone: str, request_id: str | None) -> ZoneOperation | None: ...


def automatic_restart(inst: Instance) -> bool:
    scheduling = inst.spec.get("scheduling") or {}
    value = scheduling.get("automaticRestart")
    return not (inst.spot or inst.flex) if value is None else bool(value)


class ComputeMaintenance(Timeline):
    def __init__(self, book: Book) -> None:
        super().__init__(book.options, book.state.clock)
        self.book = book

    # -----------------------------------------------------------------------------------------
    # The timeline's hooks (names are instance keys, projects/p/zones/z/instances/n).

    def host(self, name: str) -> Node | None:
        inst = self.book.instances.get(name)
        return None if inst is None else inst.host

    def schedule(self, name: str, phase: str, delay: float, serial: int) -> None:
        self.book.state.schedule(delay, "vm_tick", f"maintenance|{phase}@{name}", serial)

    def notify(self, host: Node) -> None:
        self.book.state.host_event("notice", host)

    def default_duration(self) -> float:
        return self.book.state.timing.create_seconds

    def take_down(self, name: str, now: float) -> bool:
        inst = self.book.instances.get(name)
        if inst is None or inst.status != "RUNNING" or inst.preempting:
            return False  # stopped, preempted or deleted meanwhile
        if inst.spot and self.options.compute_spot_maintenance == "preempted":
            self.book.preempt_now(inst)
            return False
        op = self.book.new_operation(
            inst.project, inst.zone, self.options.compute_maintenance_op_type, inst, user="system"
        )
        op.status_message = STATUS_MESSAGE
        op.finish(now)
        self.book.release_capacity(inst)
        inst.preempting = True  # going down on its own: `stopped` ends it as a preemption does
        self.book.set_status(inst, "STOPPING")
        stopping = self.options.compute_stopping_seconds
        delay = self.book.state.timing.delete_seconds if stopping is None else stopping
        self.book.schedule(inst, "stopped", delay)
        comes_back = automatic_restart(inst) and inst.termination_action == "STOP"
        log.info("emulator.instance.maintenance", instance=name, restart=comes_back)
        return comes_back

    def bring_up(self, name: str, now: float) -> None:
        inst = self.book.instances.get(name)
        if inst is None or inst.status != "TERMINATED":
            return  # deleted (or started by hand) meanwhile
        if not self.book.take_capacity(inst):
            log.info("emulator.instance.no_capacity_to_restart", instance=name)
            return  # stays TERMINATED: Google may restart it "outside the window"; we do not
        self.book.set_status(inst, "STAGING")
        self.book.schedule(inst, "running", self.book.state.timing.create_seconds / 2)

    # -----------------------------------------------------------------------------------------
    # Requests.

    def announce_window(self, inst: Instance, body: dict[str, Any]) -> None:
        """The control API's `:schedule-maintenance` body. `canReschedule` defaults to true:
        no size rule is documented for instances.performMaintenance."""
        window = parse_body(body, self.clock, True)
        self.announce(inst.key, inst.host, window)

    def perform(self, project: str, zone: str, name: str, request_id: str | None) -> ZoneOperation:
        """instances.performMaintenance ("Perform a manual maintenance on the instance"; body
        empty; an Operation): the pending window starts now. Without one that may start early,
        400 (`compute_perform_without_window` "refuse"; Google's answer is not published) or a
        DONE operation that does nothing ("accept")."""
        replayed = self.book.replayed(project, zone, request_id)
        if replayed is not None:
            return replayed
        inst = self.book.instance(project, zone, name)
        window = inst.host.maintenance
        block = window.render() if window is not None else None
        startable = (
            block is not None and block["maintenanceStatus"] == "PENDING" and block["canReschedule"]
        )
        if not startable and self.options.compute_perform_without_window == "refuse":
            raise errors.bad_request(
                f"The instance '{inst.key}' has no pending maintenance that can be started now."
            )
        if startable and inst.status != "RUNNING":
            raise errors.bad_request(f"The instance '{inst.key}' is {inst.status}, not RUNNING.")
        op = self.book.new_operation(
            project, zone, "performMaintenance", inst, request_id=request_id
        )
        op.finish(self.book.now())
        if startable and window is not None:
            self.start_now(inst.key, inst.host, window.type)
        return op

    def simulate(self, project: str, zone: str, name: str, request_id: str | None) -> ZoneOperation:
        """instances.simulateMaintenanceEvent: a maintenance now; a VM that cannot
        live-migrate "is either terminated or restarted, depending on the configured host
        maintenance policy" (compute/docs/instances/simulating-host-maintenance)."""
        replayed = self.book.replayed(project, zone, request_id)
        if replayed is not None:
            return replayed
        inst = self.book.instance(project, zone, name)
        if inst.status != "RUNNING":
            raise errors.bad_request(f"The instance '{inst.key}' is {inst.status}, not RUNNING.")
        op = self.book.new_operation(
            project, zone, "simulateMaintenanceEvent", inst, request_id=request_id
        )
        op.finish(self.book.now())
        self.start_now(inst.key, inst.host, "UNSCHEDULED")
        return op
