"""ComputeBook: the emulated Compute Engine's instances and zone operations, and their lifecycle.

Attached to the `EmulatorState` (as its `vms`, vm_hook.py), whose clock, timer heap, loopback
addresses, capacity limits and worker-host events it shares: an instance is a simulated worker
host (hosts/) exactly like a one-worker TPU node, and `PUT /_emulator/v1/capacity` limits
(zone, machine type) as it limits (zone, accelerator type); chip quotas per (region, machine
family) are the book's own (`quota`). The API calls (compute/requests.py, behind
compute/api.py), the managed instance groups (compute/migs.py, through `create_instance`, the
one way an instance is made) and the control API (compute/control.py) change the book through
the methods here; its operations are its base class's (compute/operations.py).

Instance lifecycle (emulator side; `gone` = removed; research section 4):
    PROVISIONING -> STAGING -> RUNNING    create_seconds/2 each; the insert operation is DONE
    PROVISIONING -> gone                  after create_seconds/2, stockout or quota (op error)
    any -> STOPPING -> gone               instances.delete, after delete_seconds
    RUNNING -> STOPPING -> TERMINATED     preempted, instanceTerminationAction STOP (default)
    RUNNING -> STOPPING -> gone           preempted, instanceTerminationAction DELETE
    any -> TERMINATED                     control :terminate;   any -> gone   control :vanish
    RUNNING -> STOPPING -> TERMINATED [-> STAGING -> RUNNING]   host maintenance
                                          (compute/maintenance.py; restarted if automaticRestart)
    PENDING -> PROVISIONING ...           flex-start: waits for capacity (compute/flex.py)
A preemption records a `compute.instances.preempted` operation by `system`; with a notice
(`notice_seconds`, or the VM's own `preemptionNoticeDuration`), the VM's metadata
`instance/preempted` is TRUE that long first. Spot VMs also die at random with
`spot_mean_lifetime_seconds`, as TPU API nodes do.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Literal

import asyncssh
import structlog

from tpucared_emulator.catalog import MACHINE_TYPES, MachineType
from tpucared_emulator.compute import errors
from tpucared_emulator.compute.errors import OpError
from tpucared_emulator.compute.flex import STEPS as FLEX_STEPS
from tpucared_emulator.compute.flex import FlexStart
from tpucared_emulator.compute.hooks import Groups, NoGroups
from tpucared_emulator.compute.maintenance import ComputeMaintenance
from tpucared_emulator.compute.operations import OperationBook
from tpucared_emulator.compute.resources import Instance, ZoneOperation
from tpucared_emulator.paging import SortedNames
from tpucared_emulator.resources import region_of
from tpucared_emulator.workers import Worker

if TYPE_CHECKING:
    from tpucared_emulator.state import EmulatorState

log = structlog.get_logger(__name__)

Step = Literal[
    "staging", "running", "deleted", "notice_over", "stopped", "expire",
    "run_over", "run_ended", "flex_expire", "mig", "maintenance",
]  # fmt: skip
# Not yet created: a PENDING flex-start VM (waiting for capacity) counts as being created.
CREATING = frozenset({"PENDING", "PROVISIONING", "STAGING"})


class ComputeBook(OperationBook):
    """Every project's and zone's instances and operations, in one emulated cloud."""

    def __init__(self, state: EmulatorState) -> None:
        self.state = state
        self.options = state.options
        self.catalog = state.catalog
        self.groups: Groups = NoGroups()
        self._init_data()
        state.vms = self

    def _init_data(self) -> None:
        self._rng = random.Random(self.options.seed)
        self.instances: dict[str, Instance] = {}  # projects/p/zones/z/instances/n -> instance
        self.index: dict[str, SortedNames] = {}  # projects/p/zones/z -> instance names
        self.ops: OrderedDict[str, ZoneOperation] = OrderedDict()  # .../operations/n -> op
        self._request_ids: dict[tuple[str, str, str], str] = {}  # (project, scope, id) -> op
        self.quota: dict[tuple[str, str], int] = {}  # (region, family) -> chips (control API)
        self.flex = FlexStart(self)  # flex-start VMs' capacity queues
        self.maintenance = ComputeMaintenance(self)  # host maintenance (compute/maintenance.py)

    # -----------------------------------------------------------------------------------------
    # Instances: records.

    def instance(self, project: str, zone: str, name: str) -> Instance:
        self.check_zone(project, zone)
        key = f"projects/{project}/zones/{zone}/instances/{name}"
        inst = self.instances.get(key)
        if inst is None:
            raise errors.not_found(key)
        return inst

    def spawn(
        self,
        project: str,
        zone: str,
        spec: dict[str, Any],
        machine: MachineType,
        *,
        uid: int | None = None,
        create_time: float | None = None,
        address: str | None = None,
    ) -> Instance:
        inst = Instance(
            project=project,
            zone=zone,
            name=spec["name"],
            spec=spec,
            machine=machine,
            uid=uid or self._rng.getrandbits(63) or 1,
            create_time=self.now() if create_time is None else create_time,
            worker=Worker(0, self.state.allocate_address(address)),
            worker_id_source=self.options.compute_worker_id_source,
        )
        self.instances[inst.key] = inst
        self.index.setdefault(f"projects/{project}/zones/{zone}", SortedNames()).add(inst.name)
        return inst

    def create_instance(
        self,
        project: str,
        zone: str,
        spec: dict[str, Any],
        machine: MachineType,
        *,
        request_id: str | None = None,
        group: str | None = None,
    ) -> ZoneOperation:
        """The one way an instance is created, by instances.insert or by a MIG (`group`, its
        key): it takes capacity now (or when the insert ends, capacity_judged "end"), or is
        doomed to fail as a stockout or over quota; its insert operation runs until RUNNING.
        A flex-start VM waits PENDING for capacity instead (flex.py)."""
        over_quota = self.quota_error(zone, machine)  # before it counts itself
        inst = self.spawn(project, zone, spec, machine)
        inst.group = group
        if over_quota is None and inst.flex:
            op = self.new_operation(project, zone, "insert", inst, request_id=request_id)
            self.flex.insert(inst, op)
            return op
        if over_quota is not None:
            inst.doomed = over_quota  # the operation fails as a stockout's does, with 403
        elif self.options.capacity_judged == "end":
            inst.capacity_pending = True
        elif not self.take_capacity(inst):
            inst.doomed = self.stockout(project, zone, machine)
        op = self.new_operation(project, zone, "insert", inst, request_id=request_id)
        inst.insert_op = op.name
        self.schedule(inst, "staging", self.state.timing.create_seconds / 2)
        return op

    def delete_instance(self, inst: Instance, request_id: str | None = None) -> ZoneOperation:
        """instances.delete, or a MIG deleting its member: STOPPING, gone after delete_seconds."""
        if inst.delete_op is not None:
            running = self.ops.get(
                f"projects/{inst.project}/zones/{inst.zone}/operations/{inst.delete_op}"
            )
            if running is not None and not running.done:
                return running
        op = self.new_operation(inst.project, inst.zone, "delete", inst, request_id=request_id)
        if inst.status in CREATING:
            # The insert did its part; a doomed one reports why it would have failed.
            self.finish_op(inst.insert_op, inst, inst.doomed)
        self.release_capacity(inst)
        inst.delete_op = op.name
        inst.preempting = False
        self.set_status(inst, "STOPPING")
        self.schedule(inst, "deleted", self.state.timing.delete_seconds)
        return op

    def take_capacity(self, inst: Instance) -> bool:
        if not self.state.has_capacity(inst.zone, inst.machine.name, 1):
            return False
        self.state.hold_capacity(inst.zone, inst.machine.name, 1)
        inst.holds_capacity = True
        return True

    def release_capacity(self, inst: Instance) -> None:
        if inst.holds_capacity:
            inst.holds_capacity = False
            self.state.hold_capacity(inst.zone, inst.machine.name, -1)
            self.flex.serve(inst.zone, inst.machine.name)  # the earliest PENDING VM's turn

    def provision_waiting(self, now: float) -> None:
        """Capacity grew or freed (lifecycle.py, after `PUT /_emulator/v1/capacity`)."""
        self.flex.serve_all()

    def stockout(self, project: str, zone: str, machine: MachineType) -> OpError:
        available = [
            z
            for z in self.catalog.compute_zones()
            if z != zone
            and self.catalog.offers_machine(z, machine.name)
            and self.state.has_capacity(z, machine.name, 1)
        ]
        code = self.options.compute_stockout_code
        return errors.stockout(code, project, zone, machine.name, available)

    def quota_used(self, region: str, family: str) -> int:
        """Chips of (region, machine family) that count against its quota: every instance
        not TERMINATED (a stopped VM holds no TPU) and not doomed."""
        return sum(
            i.machine.chips
            for i in self.instances.values()
            if i.machine.family == family
            and region_of(i.zone) == region
            and i.status != "TERMINATED"
            and i.doomed is None
        )

    def quota_error(self, zone: str, machine: MachineType) -> OpError | None:
        """QUOTA_EXCEEDED if an instance of `machine` would exceed its region's chip quota
        (`PUT /_emulator/v1/quota`). The wording is compute's (research section 3.2); the
        metric's name, `<FAMILY>_CHIPS`, is invented: Google's TPU metric names are unknown."""
        region = region_of(zone)
        limit = self.quota.get((region, machine.family))
        if limit is None or self.quota_used(region, machine.family) + machine.chips <= limit:
            return None
        metric = f"{machine.family.upper()}_CHIPS"
        message = f"Quota '{metric}' exceeded.  Limit: {float(limit)} in region {region}."
        return OpError("QUOTA_EXCEEDED", message, 403)

    def schedule(self, inst: Instance, step: Step, delay: float) -> None:
        self.state.schedule(delay, "vm_tick", f"{step}|{inst.key}", inst.generation)

    def set_status(self, inst: Instance, status: str) -> None:
        """Every edge out of RUNNING stops the hosts (they run exactly while RUNNING)."""
        if inst.status == "RUNNING" and status != "RUNNING":
            inst.host.state = status
            self.state.host_event("stop", inst.host)
        if inst.status == "PENDING":
            self.flex.leave(inst)
        inst.status = status
        inst.bump()
        if inst.group is not None:
            self.groups.member_changed(inst)

    def remove(self, inst: Instance) -> None:
        """The instance is gone: free its name, address and capacity."""
        if inst.status in ("RUNNING", "PENDING"):
            self.set_status(inst, "STOPPING")
        del self.instances[inst.key]
        self.index[f"projects/{inst.project}/zones/{inst.zone}"].discard(inst.name)
        self.state.release_address(inst.worker.ip)
        inst.bump()
        self.release_capacity(inst)  # last: the next PENDING VM may take it
        if inst.group is not None:
            self.groups.member_changed(inst)

    # -----------------------------------------------------------------------------------------
    # Transitions fired by timers.

    def tick(self, key: str, generation: int, now: float) -> None:
        step, _, name = key.partition("|")
        if step == "mig":
            self.groups.tick(name, now)
            return
        if step == "maintenance":  # "phase@instance"; `generation` is the maintenance's serial
            phase, _, key = name.partition("@")
            self.maintenance.tick(phase, key, generation, now)
            return
        inst = self.instances.get(name)
        if inst is None or inst.generation != generation:
            return  # changed since: the timer is stale
        if step == "staging":
            self._staging(inst)
        elif step == "running":
            self._running(inst, now)
        elif step == "deleted":
            self.remove(inst)
            self.finish_op(inst.delete_op, inst)
        elif step == "notice_over" and inst.status == "RUNNING":
            self.preempt_now(inst)
        elif step == "expire" and inst.status == "RUNNING" and not inst.preempting:
            self.begin_preemption(inst, None)
        elif step == "stopped":
            self._stopped(inst, now)
        elif step in FLEX_STEPS:
            self.flex.tick(step, inst, now)

    def _staging(self, inst: Instance) -> None:
        if inst.capacity_pending:
            inst.capacity_pending = False
            if not self.take_capacity(inst):
                inst.doomed = self.stockout(inst.project, inst.zone, inst.machine)
        if inst.doomed is not None:
            # A failed insert leaves nothing behind (research section 8).
            self.remove(inst)
            self.finish_op(inst.insert_op, inst, inst.doomed)
            return
        self.set_status(inst, "STAGING")
        self.schedule(inst, "running", self.state.timing.create_seconds / 2)

    def _running(self, inst: Instance, now: float) -> None:
        self.set_status(inst, "RUNNING")
        inst.last_start = now
        inst.host.state = "READY"
        inst.host.notice_at = None
        self.state.host_event("start", inst.host)
        self.finish_op(inst.insert_op, inst)
        inst.insert_op = None
        if inst.flex:
            self.flex.started(inst)
        mean = self.state.timing.spot_mean_lifetime_seconds
        if mean and inst.spot:
            self.schedule(inst, "expire", self._rng.expovariate(1.0 / mean))

    def _stopped(self, inst: Instance, now: float) -> None:
        if inst.termination_action == "DELETE":
            self.remove(inst)
            return
        self.set_status(inst, "TERMINATED")
        inst.last_stop = now
        inst.preempting = False

    # -----------------------------------------------------------------------------------------
    # What the service does on its own (control API, random spot preemptions).

    def preempt(self, project: str, zone: str, name: str, notice_seconds: float | None) -> Instance:
        inst = self.instance(project, zone, name)
        if inst.status not in CREATING | {"RUNNING"} or inst.preempting:
            raise errors.bad_request(f"cannot preempt an instance in status {inst.status}")
        self.begin_preemption(inst, notice_seconds)
        return inst

    def notice_duration(self, inst: Instance) -> float | None:
        """The VM's own `scheduling.preemptionNoticeDuration`, when the emulator honours it
        (unconfirmed for TPU VMs: research section 9, row 10)."""
        duration = (inst.spec.get("scheduling") or {}).get("preemptionNoticeDuration")
        if not self.options.compute_honour_notice_duration or not isinstance(duration, dict):
            return None
        return float(duration.get("seconds", 0)) + float(duration.get("nanos", 0)) / 1e9

    def begin_preemption(self, inst: Instance, notice_seconds: float | None) -> None:
        """A notice of `notice_seconds` (None: the VM's preemptionNoticeDuration, if any)
        first, or the preemption at once."""
        if notice_seconds is None:
            notice_seconds = self.notice_duration(inst)
        if notice_seconds and inst.status == "RUNNING":
            if inst.host.notice_at is None:
                inst.host.notice_at = self.now()
                self.state.host_event("notice", inst.host)
                self.schedule(inst, "notice_over", notice_seconds)
                log.info("emulator.instance.notice", instance=inst.key, seconds=notice_seconds)
            return
        self.preempt_now(inst)

    def preempt_now(self, inst: Instance) -> None:
        """Preempted: the operations it records (options), then STOPPING, then the
        termination action after compute_stopping_seconds."""
        if self._rng.random() >= self.options.compute_preempt_op_missing_probability:
            op = self.new_operation(
                inst.project, inst.zone, "compute.instances.preempted", inst, user="system"
            )
            op.status_message = "Instance was preempted."
            op.finish(self.now())
            deleting = inst.termination_action == "DELETE"
            if deleting and self.options.compute_preempt_records == "preempted_plus_delete":
                self.new_operation(inst.project, inst.zone, "delete", inst, user="system").finish(
                    self.now()
                )
        if inst.status in CREATING:
            # Invented wording; SkyPilot saw UNSUPPORTED_OPERATION here (research section 3.4).
            message = "The instance was preempted while it was being created."
            self.finish_op(inst.insert_op, inst, OpError("UNSUPPORTED_OPERATION", message, 400))
        self.release_capacity(inst)
        inst.preempting = True
        self.set_status(inst, "STOPPING")
        stopping = self.options.compute_stopping_seconds
        delay = self.state.timing.delete_seconds if stopping is None else stopping
        self.schedule(inst, "stopped", delay)
        log.info("emulator.instance.preempted", instance=inst.key, action=inst.termination_action)

    def terminate(self, project: str, zone: str, name: str) -> Instance:
        inst = self.instance(project, zone, name)
        if inst.status in CREATING:
            message = "The instance was terminated while it was being created."
            self.finish_op(inst.insert_op, inst, OpError("UNSUPPORTED_OPERATION", message, 400))
        self.release_capacity(inst)
        self.set_status(inst, "TERMINATED")
        inst.last_stop = self.now()
        inst.preempting = False
        return inst

    def vanish(self, project: str, zone: str, name: str) -> None:
        inst = self.instance(project, zone, name)
        if inst.status in CREATING:
            self.finish_op(inst.insert_op, inst, errors.internal())
        self.remove(inst)
        log.info("emulator.instance.vanished", instance=inst.key)

    # -----------------------------------------------------------------------------------------
    # Reset and the persisted snapshot (persistence.py, through vm_hook.VmBook).

    def reset(self) -> None:
        for inst in self.instances.values():
            if inst.status == "RUNNING":
                self.state.host_event("stop", inst.host)
        self.groups.reset()
        self._init_data()

    def snapshot(self) -> list[dict[str, Any]]:
        return [i.record() for i in self.instances.values() if i.doomed is None]

    def snapshot_groups(self) -> dict[str, Any]:
        return self.groups.snapshot()

    def restore_groups(self, snapshot: dict[str, Any]) -> None:
        self.groups.restore(snapshot)  # after the instances: members find theirs

    def restore(self, snapshot: list[dict[str, Any]]) -> None:
        for raw in snapshot:
            inst = self.spawn(
                raw["project"],
                raw["zone"],
                raw["spec"],
                MACHINE_TYPES[raw["machine_type"]],
                uid=int(raw["uid"]),
                create_time=float(raw["create_time"]),
                address=raw["ip"],
            )
            inst.worker.host_key = asyncssh.import_private_key(raw["host_key"])
            inst.status, inst.preempting = raw["status"], bool(raw["preempting"])
            inst.last_start, inst.last_stop = raw["last_start"], raw["last_stop"]
            self._resume(inst)
        self.flex.serve_all()  # once every restored instance holds its capacity again

    def _resume(self, inst: Instance) -> None:
        """A restored instance resumes its transition, with the full delay."""
        if inst.status == "PENDING":
            self.flex.enqueue(inst)  # at the back, in the snapshot's order
            return
        if inst.status != "TERMINATED" and not inst.preempting:
            self.state.hold_capacity(inst.zone, inst.machine.name, 1)
            inst.holds_capacity = True
        timing = self.state.timing
        if inst.status in CREATING:
            self.schedule(inst, "staging", timing.create_seconds / 2)
        elif inst.status == "STOPPING":
            self.schedule(inst, "stopped" if inst.preempting else "deleted", timing.delete_seconds)
        elif inst.status == "RUNNING":
            inst.status = "STAGING"
            self._running(inst, inst.last_start or self.now())
