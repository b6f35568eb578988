"""Host maintenance on the workload's terms: a fleet's `on_maintenance` before an announced window.

Where it sits: the workload planner (planner.py) asks `before_window` while an attempt runs and
`gate` before it would launch the next one; the judge (judge.py) asks `asked_at` to read an
attempt's end after the daemon's own stop signal as the maintenance's. The window is the
node's as last listed (`IncarnationRecord.maintenance`: TPU API `Node.upcomingMaintenance`,
Compute Engine `resourceStatus.upcomingMaintenance`); what was done about it is recorded on
the node (`maintenance_handled_for`, `maintenance_checkpoint_at`, `maintenance_started_at`,
migration 0013), so a restart neither asks twice nor forgets.

Rules (pure; a multislice slot's slices each have their own window, and the first due one
acts for the gang, whose runs are all signalled):

  window announced, start within        CheckpointForMaintenance: recorded as handled, the
  `maintenance_lead`, not handled,      running attempt's runs get `stop_signal` (the notice
  policy not `ignore`                   path's signal: the workload checkpoints and exits)
  the attempt signalled for it ends     PREEMPTED (judge.py): never charged to max_failures;
                                        still running `stop_grace` later: stopped, PREEMPTED
  no attempt runs, window handled:
    checkpoint                          hold: no launch into the window; the relaunch
                                        follows the window (the listing drops it)
    now, canReschedule not false        StartMaintenance once; then hold as checkpoint
    now, canReschedule false, or        hold as checkpoint, saying why (v5e/v6e below 2x4
    the cloud refused                   cannot start it early: the cloud says so)
    replace, the window longer than     the node is deleted (cause maintenance), the next
    the node's own create took          zone first; its replacement gets the next attempt
    replace, a shorter window           hold as checkpoint (a recreate would cost more)
  a window still listed `MAX_OVERRUN`   launch anyway: a window the cloud never ran nor
  after its end                         withdrew must not hold the slot for ever

The hold is lifted by the listing: once maintenance is over the cloud stops announcing the
window, the recorded one goes (core/nodes/step.py), and the next attempt launches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import MaintenanceWindow
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import OnMaintenance, WorkloadSpec
from tpucared.core.nodes.losses import MAINTENANCE_HEALTH, in_window
from tpucared.core.vocab.actions import Action
from tpucared.core.vocab.plan import Hold
from tpucared.core.workload.actions import CheckpointForMaintenance, StartMaintenance
from tpucared.core.workload.bad_hosts import replace_elsewhere
from tpucared.core.workload.slot_work import SlotWork

P = NodePhase
Policy = OnMaintenance
MAX_OVERRUN = timedelta(minutes=30)
END_REASON = "host maintenance"


@dataclass(frozen=True)
class Due:
    """A slice's window that the policy acts on."""

    node: IncarnationRecord
    window: MaintenanceWindow
    start: datetime


def nodes_of(w: SlotWork) -> list[IncarnationRecord]:
    """The slot's READY nodes: its node, or a gang's slices."""
    if w.gang is not None:
        return [i for i in w.gang.slices if i.phase is P.READY]
    return [w.node] if w.node is not None and w.node.phase is P.READY else []


def before_window(w: SlotWork, attempt: int | None) -> list[Action]:
    """The checkpoint of a window now within the lead (None when nothing is due): signal
    `attempt` (None: no attempt runs, the window is only recorded as handled)."""
    spec = w.spec
    if spec is None or spec.on_maintenance is Policy.IGNORE:
        return []
    due = _first(w, lambda n: _due(n, spec, w.now))
    if due is None:
        return []
    return [
        CheckpointForMaintenance(
            fleet=w.fleet,
            slot=w.index,
            incarnation_id=due.node.id,
            node_name=due.node.node_name,
            window_start=due.start,
            attempt=attempt,
            signal=spec.stop_signal,
            reason=f"{due.node.node_name}: {_words(due.window)} starts in "
            f"{_left(due.start, w.now)} (maintenance_lead {spec.maintenance_lead:g}s, "
            f"on_maintenance = {spec.on_maintenance.value})",
        )
    ]


def asked_at(w: SlotWork, started_at: datetime) -> datetime | None:
    """When the daemon sent the attempt started at `started_at` its stop signal for a
    maintenance window (None: it did not): its end is then the maintenance's."""
    asks = [
        n.maintenance_checkpoint_at
        for n in nodes_of(w)
        if n.maintenance_checkpoint_at is not None and n.maintenance_checkpoint_at >= started_at
    ]
    return min(asks, default=None)


def under_way(w: SlotWork) -> bool:
    """Whether host maintenance may be under way on a node of the slot: its health says so
    (UNHEALTHY_MAINTENANCE), or its announced window is running (core/nodes/losses.py)."""
    return host_down(w) or any(in_window(n.maintenance, w.now) for n in nodes_of(w))


def host_down(w: SlotWork) -> bool:
    """A node of the slot says its host is in maintenance now (health UNHEALTHY_MAINTENANCE):
    nothing is launched until it is back."""
    return any(n.health == MAINTENANCE_HEALTH for n in nodes_of(w))


def gate(w: SlotWork) -> tuple[list[Action], list[Hold]] | None:
    """With no attempt running: what the policy does about a handled window instead of a
    launch (a start, a replacement, a hold), or None when no window stands in the way."""
    spec = w.spec
    if spec is None:
        return None
    due = _first(w, lambda n: _handled(n, w.now))
    if due is None:
        return None
    node, window = due.node, due.window
    hold = _hold(w, node, f"waiting for {_words(window)} of {node.node_name} to pass")
    policy = spec.on_maintenance
    if policy is Policy.NOW:
        if node.maintenance_started_at is not None:
            return [], [_hold(w, node, f"maintenance of {node.node_name} asked to start now "
                              f"at {node.maintenance_started_at.isoformat(timespec='seconds')}; "
                              "waiting for it to pass")]  # fmt: skip
        if window.can_reschedule is False or window.status != "PENDING":
            why = "the cloud does not allow it (canReschedule false)"
            if window.status != "PENDING":
                why = f"it is {window.status or 'not pending'}"
            return [], [_hold(w, node, f"cannot start the maintenance of {node.node_name} "
                              f"early: {why}; waiting for the window")]  # fmt: skip
        start = StartMaintenance(
            fleet=w.fleet,
            slot=w.index,
            incarnation_id=node.id,
            node_name=node.node_name,
            window_start=due.start,
            reason=f"{node.node_name}: the workload has checkpointed; start {_words(window)} "
            "now (on_maintenance = now)",
        )
        return [start], [hold]
    if policy is Policy.REPLACE and _replace_pays(node, window):
        return _replace(w, node, window), []
    return [], [hold]


# ---------------------------------------------------------------------------------------------


Pick = Callable[[IncarnationRecord], MaintenanceWindow | None]


def _first(w: SlotWork, pick: Pick) -> Due | None:
    for node in nodes_of(w):
        window = pick(node)
        if window is not None and window.start is not None:
            return Due(node, window, window.start)
    return None


def _due(node: IncarnationRecord, spec: WorkloadSpec, now: datetime) -> MaintenanceWindow | None:
    win = node.maintenance
    if win is None or win.start is None or _ours(node, win.start):
        return None
    if now < win.start - timedelta(seconds=spec.maintenance_lead) or _over(win, now):
        return None
    return win


def _handled(node: IncarnationRecord, now: datetime) -> MaintenanceWindow | None:
    win = node.maintenance
    if win is None or win.start is None or not _ours(node, win.start):
        return None
    return None if _over(win, now) else win


def _ours(node: IncarnationRecord, start: datetime) -> bool:
    """Whether the window starting at `start` is the one already handled: the same start, or,
    once the daemon asked to start it early, a start moved earlier (the cloud may list the
    started maintenance from the moment it began; what Google shows is not documented)."""
    handled = node.maintenance_handled_for
    if handled is None:
        return False
    return start == handled or (node.maintenance_started_at is not None and start <= handled)


def _over(win: MaintenanceWindow, now: datetime) -> bool:
    assert win.start is not None
    return now > (win.end or win.start) + MAX_OVERRUN


def _replace_pays(node: IncarnationRecord, window: MaintenanceWindow) -> bool:
    """Whether the window stops the node for longer than its own create took (request to
    READY): then a new node serves sooner. A window with no end announced: assume so."""
    if window.end is None or window.start is None:
        return True
    if node.ready_at is None:
        return True
    return window.end - window.start > node.ready_at - node.requested_at


def _replace(w: SlotWork, node: IncarnationRecord, window: MaintenanceWindow) -> list[Action]:
    """The node deleted with cause maintenance; the next zone first (bad_hosts.py)."""
    reason = f"replace {node.node_name} before {_words(window)} (on_maintenance = replace)"
    return replace_elsewhere(w, node, reason, END_REASON, LossCause.MAINTENANCE)


def _hold(w: SlotWork, node: IncarnationRecord, reason: str) -> Hold:
    return Hold(fleet=w.fleet, slot=w.index, node_name=node.node_name, reason=reason)


def _words(window: MaintenanceWindow) -> str:
    kind = (window.type or "host").lower()
    start = window.start.isoformat(timespec="seconds") if window.start else "?"
    return f"the {kind} maintenance window at {start}"


def _left(start: datetime, now: datetime) -> str:
    seconds = max((start - now).total_seconds(), 0.0)
    return f"{seconds:.0f}s"
