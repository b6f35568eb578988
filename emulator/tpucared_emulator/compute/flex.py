"""Flex-start VMs: the capacity queue a PENDING instance waits in, and the run that ends.

Part of compute/book.py's `ComputeBook` (as its `flex`); requests.py hands it a validated
FLEX_START insert (`scheduling.provisioningModel: FLEX_START`, validation.py). Google's
documentation (docs/research/compute-engine.md section 6.9): the VM waits in status PENDING
("waiting for available capacity from Dynamic Workload Scheduler") until capacity comes, then
is created as any other VM and runs for at most `scheduling.maxRunDuration`, after which its
termination action (DELETE) ends it; `params.requestValidForDuration` bounds the wait.

Here, per (zone, machine type) of the capacity table (`PUT /_emulator/v1/capacity`), one FIFO
queue: whenever a unit of capacity frees (an instance deleted, preempted, ended; the limit
raised), the earliest PENDING request takes it and goes PROVISIONING -> STAGING -> RUNNING.
When RUNNING, `scheduling.terminationTime` = start + maxRunDuration; at that time the VM is
STOPPING, then gone (or TERMINATED). What Google leaves unsaid is an `EmulatorOptions` option:
the insert operation while PENDING (`compute_flex_insert_op`), the end of the run
(`compute_flex_run_end`, `compute_flex_run_end_records`) and the end of the wait
(`compute_flex_expiry`).

Lifecycle (added to book.py's):
    PENDING -> PROVISIONING -> STAGING -> RUNNING   when its queue's turn and capacity come
    PENDING -> gone | TERMINATED                     requestValidForDuration ran out
    RUNNING -> STOPPING -> gone | TERMINATED         at terminationTime (compute_flex_run_end)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

import structlog

from tpucared_emulator.compute.errors import OpError
from tpucared_emulator.compute.resources import Instance, ZoneOperation
from tpucared_emulator.compute.validation import duration_seconds

if TYPE_CHECKING:
    from tpucared_emulator.options import EmulatorOptions
    from tpucared_emulator.state import EmulatorState

log = structlog.get_logger(__name__)

# INVENTED: Google does not say whether an operation records the end of a flex-start run
# (research section 9, row 17), nor what it would be called. Only with
# compute_flex_run_end_records = "system_op".
RUN_END_OP = "compute.instances.maxRunDurationTermination"
# INVENTED: the error of a flex-start request whose requestValidForDuration ran out before
# capacity came (research section 9, row 16); code and wording are ours.
EXPIRED = OpError(
    "FLEX_START_REQUEST_EXPIRED",
    "The flex-start request expired before capacity became available "
    "(params.requestValidForDuration).",
    503,
)
STEPS = frozenset({"run_over", "run_ended", "flex_expire"})
FlexStep = Literal["staging", "run_over", "run_ended", "flex_expire"]  # the timers set here


class Book(Protocol):
    """What flex-start uses of compute/book.py's `ComputeBook` (which owns a `FlexStart`:
    typed here so that flex.py need not import book.py)."""

    state: EmulatorState
    options: EmulatorOptions
    instances: dict[str, Instance]

    def now(self) -> float: ...

    def schedule(self, inst: Instance, step: FlexStep, delay: float) -> None: ...

    def set_status(self, inst: Instance, status: str) -> None: ...

    def take_capacity(self, inst: Instance) -> bool: ...

    def release_capacity(self, inst: Instance) -> None: ...

    def remove(self, inst: Instance) -> None: ...

    def finish_op(
        self, op_name: str | None, inst: Instance, error: OpError | None = None
    ) -> None: ...

    def new_operation(
        self, project: str, zone: str, operation_type: str, target: Instance, *, user: str = ...
    ) -> ZoneOperation: ...


def _seconds(inst: Instance, parent: str, key: str) -> float | None:
    return duration_seconds((inst.spec.get(parent) or {}).get(key))


class FlexStart:
    """The FIFO queues of PENDING flex-start instances and the timers of their runs."""

    def __init__(self, book: Book) -> None:
        self.book = book
        self.options = book.options
        # (zone, machine type) -> instance keys in arrival order (a dict: ordered, O(1) pop).
        self.queues: dict[tuple[str, str], dict[str, None]] = {}

    def insert(self, inst: Instance, op: ZoneOperation) -> None:
        """A new FLEX_START instance: PENDING at the end of its queue, served at once if
        capacity is there. Its insert operation ends now or when the VM runs (option)."""
        book = self.book
        self.enqueue(inst)
        valid_for = _seconds(inst, "params", "requestValidForDuration")
        if valid_for is not None:
            book.schedule(inst, "flex_expire", valid_for)
        keep_running = self.options.compute_flex_insert_op == "done_when_running" or (
            valid_for is not None and self.options.compute_flex_expiry == "op_error"
        )
        if keep_running:
            inst.insert_op = op.name
        else:
            op.finish(book.now())
        self.serve(inst.zone, inst.machine.name)

    def enqueue(self, inst: Instance) -> None:
        """PENDING at the end of its (zone, machine type) queue (also a restored one)."""
        inst.status = "PENDING"
        inst.bump()
        self.queues.setdefault((inst.zone, inst.machine.name), {})[inst.key] = None

    def leave(self, inst: Instance) -> None:
        """Out of its queue (served, deleted, terminated, expired, vanished)."""
        queue = self.queues.get((inst.zone, inst.machine.name))
        if queue is not None:
            queue.pop(inst.key, None)
            if not queue:
                del self.queues[(inst.zone, inst.machine.name)]

    def serve(self, zone: str, machine: str) -> None:
        """Earliest first: each PENDING instance that capacity now fits starts provisioning."""
        book = self.book
        queue = self.queues.get((zone, machine))
        while queue and book.state.has_capacity(zone, machine, 1):
            inst = book.instances[next(iter(queue))]
            self.leave(inst)
            book.take_capacity(inst)
            book.set_status(inst, "PROVISIONING")
            book.schedule(inst, "staging", book.state.timing.create_seconds / 2)
            log.info("emulator.instance.flex_capacity", instance=inst.key)

    def serve_all(self) -> None:
        """Capacity grew or freed somewhere (`PUT /_emulator/v1/capacity`)."""
        for zone, machine in list(self.queues):
            self.serve(zone, machine)

    def started(self, inst: Instance) -> None:
        """RUNNING: the run ends at start + maxRunDuration (scheduling.terminationTime)."""
        run = _seconds(inst, "scheduling", "maxRunDuration")
        if run is None or inst.last_start is None:
            return
        shortened = self.book.options.compute_flex_run_seconds
        run = run if shortened is None else shortened
        inst.run_ends_at = inst.last_start + run
        inst.bump()
        # From the clock, not `now`: a restored instance resumes with its start in the past.
        self.book.schedule(inst, "run_over", max(0.0, inst.run_ends_at - self.book.now()))

    # -----------------------------------------------------------------------------------------
    # Timers.

    def tick(self, step: str, inst: Instance, now: float) -> None:
        if step == "run_over" and inst.status == "RUNNING":
            self._run_over(inst, now)
        elif step == "run_ended" and inst.status == "STOPPING":
            self._run_ended(inst, now)
        elif step == "flex_expire" and inst.status == "PENDING":
            self._expire(inst, now)

    def _run_over(self, inst: Instance, now: float) -> None:
        """terminationTime: the termination action begins (STOPPING, capacity given back)."""
        book = self.book
        if self.options.compute_flex_run_end_records == "system_op":
            op = book.new_operation(inst.project, inst.zone, RUN_END_OP, inst, user="system")
            op.status_message = "Instance reached its maxRunDuration."
            op.finish(now)
        book.release_capacity(inst)
        book.set_status(inst, "STOPPING")
        stopping = self.options.compute_stopping_seconds
        delay = book.state.timing.delete_seconds if stopping is None else stopping
        book.schedule(inst, "run_ended", delay)
        log.info("emulator.instance.flex_run_over", instance=inst.key)

    def _run_ended(self, inst: Instance, now: float) -> None:
        if self.options.compute_flex_run_end == "delete":
            self.book.remove(inst)
            return
        self.book.set_status(inst, "TERMINATED")
        inst.last_stop = now

    def _expire(self, inst: Instance, now: float) -> None:
        """requestValidForDuration ran out while PENDING (what follows: compute_flex_expiry)."""
        book = self.book
        book.finish_op(inst.insert_op, inst, EXPIRED)
        inst.insert_op = None
        if self.options.compute_flex_expiry == "instance_terminated":
            book.set_status(inst, "TERMINATED")
            inst.last_stop = now
        else:
            book.remove(inst)
        log.info("emulator.instance.flex_expired", instance=inst.key)
