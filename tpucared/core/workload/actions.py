"""The workload actions, and the contract the workload runner honours for each.

The workload planner (core/workload/planner.py) returns these among a tick's plan; the runtime's
`WorkloadRunner` (runtime/workload/runner.py) carries them out, in plan order per slot, after the
node actions. Like the node actions (core/vocab/actions.py) they are idempotent and safe to
re-run after a crash: intent is recorded before the remote step, each store write is a
compare-and-set, and every remote step is idempotent on the worker (a run directory holds
exactly one run: launching into it again reports the run instead of starting another).

Division of labour: the runner never decides. What it finds out (a TPU still held after a
cleanup, a worker that cannot be reached) comes back as data in the next tick's `SlotProbe`
(core/workload/inputs.py) and the planner decides then. A failed remote step is logged and
left for the next probe to show; it raises only for bugs.

Worker layout (per slot, `run_id` = SlotRecord.run_id, stable across recreations):
    ~/.tpucared/runs/<run_id>/attempt-<n>/  one attempt's run (pid, log, exit code, run.sh)
    ~/.tpucared/runs/<run_id>/secrets.env   the secrets, mode 0600, sourced by the run
    ~/.tpucared/setup-<digest>.done         setup done on this disk (digest of the setup)

Per action (T = one store transaction):

LaunchWorkload  New attempt (`attempt_id` None):
                  1. Secrets read from the daemon's environment (WorkloadSpec.secrets: name ->
                     variable) and registered for log redaction; one missing (or
                     `workload.files` unreadable) -> refuse (core/workload/launch_gate.py).
                  2. `clean_after` set (an earlier attempt ran on this node): cleanup of that
                     attempt on every worker (TERM/KILL its process group, kill holders of the
                     TPU devices, remove the libtpu lock file). Any worker `busy` -> remember
                     it for SlotProbe.busy; any worker busy or not reached -> remember it for
                     SlotProbe.unclean and refuse.
                  3. T: start_attempt(incarnation_id): its `number` must equal `attempt`
                     (else roll back and stop: the snapshot was stale). Read the slot's
                     counters in the same T for TPUCARED_PREEMPTIONS / TPUCARED_FAILURES.
                Refuse = log and append a `workload.launch_refused` event with the rule's
                words, and stop; the next probe tells the planner.
                Resume (`attempt_id` set, the running attempt): step 1 only, then on; nothing
                is killed, since workers that did start this attempt keep it.
                Then on every worker: upload `files` and the secrets file (content on SSH
                stdin, never on a command line); then launch detached into
                attempt-<attempt> with the TPUCARED_* environment plus `env`, running the
                setup first if this disk has not completed it (output in the run's log).
                A worker that fails any step is logged; the next probe shows it never
                started and the planner resumes or fails the attempt.
StopWorkload    Cleanup of attempt `attempt` on every worker (as LaunchWorkload step 2);
                `busy` and unclean workers are remembered for SlotProbe.busy / .unclean. No
                store write but an event.
FinishAttempt   T: finish_attempt(attempt_id, outcome, exit_codes, detail): compare-and-set on
                the attempt still running (a repeat is skipped); FAILED and HUNG add one to the
                slot's `failures` (CHARGED_OUTCOMES). PREEMPTED does not: the node planner
                counts preemptions when the node dies. In the same T, each of `notices`
                (the nodes whose runs got the VM's notice, as the probe read it) gets its
                `preemption.notice` event unless the notice watch recorded one first: a
                run that stops within milliseconds of its notice can reach the poll's
                probe before the watch's answer, and the event must not depend on which.
MarkSlotDone    T: update_slot(done=True). The node planner then deletes the slot's node
                unless on_success = keep, and never creates one for it again.
CheckpointForMaintenance  The node's announced maintenance window is `maintenance_lead` away
                (core/workload/maintenance.py). T: record the window as handled on the node
                (its start, and the time: `nodes.maintenance_handled_for` /
                `maintenance_checkpoint_at`) with a `maintenance.checkpoint` event, then, when
                an attempt runs, send its runs on every slice the fleet's `stop_signal`. The
                record comes first: the judge then reads the attempt's end as the
                maintenance's (PREEMPTED, never charged), even after a crash in between.
StartMaintenance  T: record `maintenance_started_at` (asked once, whatever the answer), then
                ask the node's cloud to start the window now (`Cloud.start_maintenance`); an
                event says whether it did (`maintenance.started`) or why not
                (`maintenance.start_refused`: the planner then waits for the window).
Replacing a node whose TPU stays busy or whose workers stopped answering is a plain
`DeleteNode` (core/vocab/actions.py) with `expected` READY: the daemon's executor carries it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Final

from tpucared.core.model.records import AttemptOutcome
from tpucared.core.vocab.actions import Action
from tpucared.core.workload.inputs import NoticeKind

# Outcomes charged to the slot's crash budget (must match tpucared.store.write_workloads).
CHARGED_OUTCOMES: Final = frozenset({AttemptOutcome.FAILED, AttemptOutcome.HUNG})


@dataclass(frozen=True, kw_only=True)
class LaunchWorkload(Action):
    kind: ClassVar[str] = "launch"
    fleet: str
    slot: int
    incarnation_id: int
    node_name: str
    attempt: int  # TPUCARED_ATTEMPT: slot.attempts + 1, or the running attempt's when resuming
    attempt_id: int | None = None  # set: resume this recorded, running attempt
    clean_after: int | None = None  # an earlier attempt on this node: free the TPU of it first

    def subject(self) -> str:
        return f"{self.fleet}/{self.slot}"

    def summary(self) -> str:
        how = "resume " if self.attempt_id is not None else ""
        clean = f" after cleaning attempt {self.clean_after}" if self.clean_after else ""
        return f"{self.fleet}/{self.slot} {how}attempt {self.attempt} on {self.node_name}{clean}"


@dataclass(frozen=True, kw_only=True)
class StopWorkload(Action):
    kind: ClassVar[str] = "stop"
    fleet: str
    slot: int
    incarnation_id: int
    node_name: str
    attempt: int

    def subject(self) -> str:
        return f"{self.fleet}/{self.slot}"

    def summary(self) -> str:
        return f"{self.fleet}/{self.slot} attempt {self.attempt} on all of {self.node_name}"


@dataclass(frozen=True)
class HeardNotice:
    """A node whose runs got the VM's notice (`kind` MAINTENANCE for a host-maintenance
    termination; PREEMPTED or None, the run did not say, for a preemption), at `at` on the
    run's clock, as the probe read it."""

    incarnation_id: int
    node_name: str
    at: datetime
    kind: NoticeKind | None = None


@dataclass(frozen=True, kw_only=True)
class FinishAttempt(Action):
    kind: ClassVar[str] = "finish"
    fleet: str
    slot: int
    attempt_id: int
    attempt: int
    outcome: AttemptOutcome
    exit_codes: Mapping[int, int | None] = field(default_factory=dict)  # worker -> code
    detail: str | None = None
    notices: tuple[HeardNotice, ...] = ()  # the attempt ended on these nodes' notices

    def subject(self) -> str:
        return f"{self.fleet}/{self.slot}"

    def summary(self) -> str:
        return f"{self.fleet}/{self.slot} attempt {self.attempt} {self.outcome.value}"


@dataclass(frozen=True, kw_only=True)
class MarkSlotDone(Action):
    kind: ClassVar[str] = "slot-done"
    fleet: str
    slot: int

    def subject(self) -> str:
        return f"{self.fleet}/{self.slot}"


@dataclass(frozen=True, kw_only=True)
class CheckpointForMaintenance(Action):
    kind: ClassVar[str] = "maintenance-checkpoint"
    fleet: str
    slot: int
    incarnation_id: int  # the node whose window it is
    node_name: str
    window_start: datetime
    attempt: int | None  # the running attempt to signal; None: nothing runs, only recorded
    signal: str  # the fleet's stop_signal

    def subject(self) -> str:
        return f"{self.fleet}/{self.slot}"

    def summary(self) -> str:
        what = f"attempt {self.attempt} gets SIG{self.signal}" if self.attempt else "no run"
        return f"{self.fleet}/{self.slot} before the window of {self.node_name}: {what}"


@dataclass(frozen=True, kw_only=True)
class StartMaintenance(Action):
    kind: ClassVar[str] = "maintenance-start"
    fleet: str
    slot: int
    incarnation_id: int
    node_name: str
    window_start: datetime

    def subject(self) -> str:
        return f"{self.fleet}/{self.slot}"

    def summary(self) -> str:
        return f"{self.fleet}/{self.slot} start the maintenance of {self.node_name} now"


WORKLOAD_ACTIONS: tuple[type[Action], ...] = (
    LaunchWorkload,
    StopWorkload,
    FinishAttempt,
    MarkSlotDone,
    CheckpointForMaintenance,
    StartMaintenance,
)

__all__ = [
    "CHARGED_OUTCOMES",
    "WORKLOAD_ACTIONS",
    "CheckpointForMaintenance",
    "FinishAttempt",
    "LaunchWorkload",
    "MarkSlotDone",
    "StartMaintenance",
    "StopWorkload",
]
