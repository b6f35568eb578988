"""What `tpucared status` shows, built from the store's `FleetStatus` read model.

`status_document` is the machine-readable form (`status --json` and `GET /v1/status`): a
versioned JSON document whose keys only grow (see docs/inspecting.md). It depends on the
database contents alone, apart from `generated_at`, so that two readers of the same database
agree; durations such as a node's uptime are left to the reader (`generated_at - ready_at`).

`status_lines` is the human form: one table row per slot (a multislice slot's slices beneath
it, one row each), one summary line per fleet, and one
line per zone whose lists are failing (the daemon cannot see, so cannot keep, its nodes there;
a slot with no error of its own shows the zone's in LAST ERROR), and one line per slot whose
workload jobs are failing (core/workload/job_failures.py: the daemon retries them with a
backoff; the line goes once a job of the slot runs again), then which daemon leads
(inspect/leader.py), with a warning when its lease is stale.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tpucared.core.leadership.lease import Lease, Role
from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.observed import MaintenanceWindow
from tpucared.core.model.records import (
    EventRecord,
    IncarnationRecord,
    NodePhase,
    WorkerRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import CapacityKind, location_name
from tpucared.core.planning.stockout import in_stockout
from tpucared.inspect.fmt import NONE, clock_time, duration, iso, table, truncate
from tpucared.inspect.leader import leader_doc, leader_lines
from tpucared.store.snapshot import FleetStatus, SliceStatus, SlotKey, SlotStatus, ZoneHealth

STATUS_VERSION = 1  # bumped only for an incompatible change; new keys do not bump it
LAST_ERROR_WIDTH = 60
LOSSES_WIDTH = 32
HEADERS = (
    "FLEET",
    "SLOT",
    "NODE",
    "ZONE",
    "PHASE",
    "CLOUD",
    "ATTEMPT",
    "PREEMPT",
    "FAIL",
    "LOSSES",
    "GOODPUT",
    "UPTIME",
    "LAST ERROR",
)


# -- JSON ---------------------------------------------------------------------------------------


def status_document(
    fleets: Sequence[FleetStatus],
    generated_at: datetime,
    lease: Lease | None = None,
    role: Role | None = None,
) -> dict[str, Any]:
    """`lease`: the leader lease (inspect/leader.py); `role`: the serving daemon's."""
    return {
        "version": STATUS_VERSION,
        "generated_at": iso(generated_at),
        "leader": leader_doc(lease, generated_at, role),
        "fleets": [
            {
                "name": f.fleet.name,
                "spec_hash": f.fleet.spec_hash,
                "applied_at": iso(f.fleet.applied_at),
                "down": f.fleet.down,
                "slots": [_slot_doc(s, f.fleet.down, flex_start(f)) for s in f.slots],
                "failing_zones": [z.zone for z in f.failing_zones],
            }
            for f in fleets
        ],
        "zones": [_zone_doc(z) for z in failing_zones(fleets)],
    }


def failing_zones(fleets: Sequence[FleetStatus]) -> list[ZoneHealth]:
    """The zones of these fleets whose lists are failing, once each, by project and zone."""
    seen = {(z.project, z.zone): z for f in fleets for z in f.failing_zones}
    return [seen[k] for k in sorted(seen)]


def _zone_doc(z: ZoneHealth) -> dict[str, Any]:
    return {
        "project": z.project,
        "zone": z.zone,
        "failed_lists": z.failures,
        "unreachable": z.unreachable,
        "error_kind": None if z.error_kind is None else z.error_kind.value,
        "error_message": z.error_message,
        "failing_since": iso(z.failing_since),
        "last_ok_at": iso(z.last_ok_at),
        "next_list_at": iso(z.next_list_at),
    }


def waiting_for_capacity(s: SlotStatus, down: bool = False) -> bool:
    """The slot waits for capacity: core/planning/stockout.py's rule, which the stockout
    notifications (runtime/notifications.py) count too."""
    return in_stockout(s.slot, s.last_create, s.node, down=down)


def flex_start(f: FleetStatus) -> bool:
    """The fleet asks for flex-start capacity, as its stored spec says."""
    return _capacity(f.fleet.spec_json) == CapacityKind.FLEX_START.value


@functools.lru_cache(maxsize=256)
def _capacity(spec_json: str) -> object:
    try:
        spec = json.loads(spec_json)
    except ValueError:
        return None
    return spec.get("capacity") if isinstance(spec, dict) else None


def flex_waiting_since(s: SlotStatus, flex: bool) -> datetime | None:
    """Since when a flex-start slot's node waits for capacity (the Dynamic Workload
    Scheduler's PENDING, or its create not yet accepted): its create's request; None when it
    does not wait so."""
    node = s.node
    if not flex or node is None or node.phase not in (NodePhase.REQUESTED, NodePhase.CREATING):
        return None
    return node.requested_at


def _slot_doc(s: SlotStatus, down: bool = False, flex: bool = False) -> dict[str, Any]:
    slot = s.slot
    return {
        "slot": slot.index,
        "run_id": slot.run_id,
        "attempts": slot.attempts,
        "preemptions": slot.preemptions,
        "failures": slot.failures,
        "create_failures": slot.create_failures,
        "next_create_at": iso(slot.next_create_at),
        "next_zone": slot.next_zone,
        "last_error": slot.last_error,
        "done": slot.done,
        # Its losses by cause (core/model/causes.py): {"preempted": 2, "maintenance": 1}.
        "losses": dict(s.losses),
        "waiting_for_capacity": waiting_for_capacity(s, down),
        # A flex-start slot's node waiting for capacity: since when (null otherwise).
        "waiting_for_flex_start_since": iso(flex_waiting_since(s, flex)),
        "node": None if s.node is None else _node_doc(s.node, s.workers),
        "workload": None if s.last_attempt is None else _attempt_doc(s.last_attempt),
        "job_failure": None if s.job_failure is None else _job_failure_doc(s.job_failure),
        # A multislice slot's slices ("node" is then slice 0's); empty for a single slice.
        "slices": [{"slice": p.index, "node": _node_doc(p.node, p.workers)} for p in s.slices],
    }


def _job_failure_doc(e: EventRecord) -> dict[str, Any]:
    """The slot's failing workload jobs, from its newest `workload.job_failed` event."""
    return {
        "job": e.details.get("job"),
        "error": e.details.get("error"),
        "failures": e.details.get("failures"),
        "at": iso(e.at),
        "event_id": e.id,
    }


def _node_doc(node: IncarnationRecord, workers: Sequence[WorkerRecord]) -> dict[str, Any]:
    return {
        "id": node.id,
        "name": node.node_name,
        "zone": node.zone,
        "project": node.project or None,  # null: the daemon's own (gcp.project)
        "accelerator_type": node.accelerator_type,  # a compute fleet's: its machine type
        "api": node.api,  # the cloud API that made it: "tpu" or "compute"
        "phase": node.phase.value,
        "live": node.phase in LIVE_PHASES,
        "phase_since": iso(node.phase_since),
        "cloud_state": node.cloud_state,
        "health": node.health,
        "cloud_id": node.cloud_id,
        "requested_at": iso(node.requested_at),
        "ready_at": iso(node.ready_at),
        "dead_at": iso(node.dead_at),
        "deleted_at": iso(node.deleted_at),
        "end_reason": node.end_reason,
        "run_ends_at": iso(node.run_ends_at),  # a flex-start node's planned end, else null
        "maintenance": _maintenance_doc(node.maintenance),  # its next window, else null
        "error": None if node.error is None else node.error.value,
        "operation": node.operation,
        "queued_resource": node.queued_resource,
        "delete_calls": node.delete_calls,
        "workers": [
            {"index": w.index, "internal_ip": w.internal_ip, "external_ip": w.external_ip}
            for w in workers
        ],
    }


def _attempt_doc(a: WorkloadAttemptRecord) -> dict[str, Any]:
    return {
        "id": a.id,
        "number": a.number,
        "state": _attempt_state(a),
        "started_at": iso(a.started_at),
        "ended_at": iso(a.ended_at),
        # JSON object keys are strings; sorted so the document is byte-stable.
        "exit_codes": {str(k): a.exit_codes[k] for k in sorted(a.exit_codes)},
        "detail": a.detail,
    }


def _attempt_state(a: WorkloadAttemptRecord) -> str:
    return "running" if a.outcome is None else a.outcome.value


# -- table --------------------------------------------------------------------------------------


def _ready(s: SlotStatus) -> bool:
    """The slot's node is READY: every slice of a multislice slot."""
    if s.slices:
        return all(p.node.phase is NodePhase.READY for p in s.slices)
    return s.node is not None and s.node.phase is NodePhase.READY


def status_lines(
    fleets: Sequence[FleetStatus],
    now: datetime,
    lease: Lease | None = None,
    goodput: Mapping[SlotKey, float] | None = None,
) -> list[str]:
    """The table, a blank line, then one summary line per fleet, then the leader. `goodput`:
    each slot's productive share by the ledger (inspect/ledger.py `shares`; none: `-`)."""
    rows: list[list[str]] = []
    shares = goodput or {}
    for f in fleets:  # the store orders fleets by name and slots by index
        rows += [
            r for s in f.slots for r in _rows(f, s, now, shares.get((f.fleet.name, s.slot.index)))
        ] or [_empty_fleet_row(f)]
    zones = [_zone_line(z, now) for z in failing_zones(fleets)]
    jobs = [_job_line(f, s, now) for f in fleets for s in f.slots if s.job_failure is not None]
    leader = leader_lines(lease, now)
    return [*table(HEADERS, rows), "", *(_summary(f) for f in fleets), *zones, *jobs, *leader]


def _job_line(f: FleetStatus, s: SlotStatus, now: datetime) -> str:
    e = s.job_failure
    assert e is not None
    count = e.details.get("failures")
    times = f"{count} in a row" if isinstance(count, int) and count > 1 else "once"
    return (
        f"slot {f.fleet.name}/{s.slot.index}: workload job {e.details.get('job')} failed "
        f"{times}, last {duration(now - e.at)} ago: {e.details.get('error')} "
        "(retried with a backoff; `tpucared events` has each failure)"
    )


def _zone_line(z: ZoneHealth, now: datetime) -> str:
    since = duration(now - z.failing_since) if z.failing_since is not None else NONE
    state = "unreachable" if z.unreachable else "failing"
    line = f"zone {z.zone}: {state}, {z.failures} failed lists in a row for {since}"
    if z.next_list_at is not None and z.next_list_at > now:
        line += f", asked again in {duration(z.next_list_at - now)}"
    return f"{line}: {z.error_text}"


def _zone_error(f: FleetStatus, s: SlotStatus) -> str | None:
    """A failing list of the zone the slot lives in (any of the fleet's if it has no node)."""
    node_zone = s.node.zone if s.node is not None and s.node.phase in LIVE_PHASES else None
    for z in f.failing_zones:
        if node_zone is None or z.zone == node_zone:
            return f"listing {z.zone} fails: {z.error_text}"
    return None


def _rows(f: FleetStatus, s: SlotStatus, now: datetime, share: float | None) -> list[list[str]]:
    """One row per slot; a multislice slot's row says how many slices are READY and its
    slices follow, one row each."""
    row = _row(f, s, now)
    row[10] = f"{share:.0%}" if share is not None else NONE
    if not s.slices:
        return [row]
    ready = [p for p in s.slices if p.node.phase is NodePhase.READY]
    row[2] = f"{f.fleet.name}-{s.slot.index} ({len(s.slices)} slices)"
    if row[4] != "done" and not row[4].startswith("waiting for"):
        row[4] = "ready" if len(ready) == len(s.slices) else f"{len(ready)}/{len(s.slices)} ready"
    row[5] = NONE
    uptimes = [now - p.node.ready_at for p in ready if p.node.ready_at is not None]
    row[11] = duration(min(uptimes)) if len(ready) == len(s.slices) and uptimes else NONE
    return [row, *(_slice_row(p, now) for p in s.slices)]


def _slice_row(p: SliceStatus, now: datetime) -> list[str]:
    node = p.node
    uptime = NONE
    if node.phase is NodePhase.READY and node.ready_at is not None:
        uptime = duration(now - node.ready_at)
    where = location_name(node.project, node.zone)
    blank = [""] * 5
    why = node.end_reason if node.phase not in LIVE_PHASES else None
    return ["", f"  slice {p.index}", node.node_name, where, node.phase.value, _cloud(node),
            *blank, uptime, truncate(why, LAST_ERROR_WIDTH)]  # fmt: skip


def _maintenance_doc(w: MaintenanceWindow | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {"start": iso(w.start), "end": iso(w.end), "type": w.type, "status": w.status,
            "can_reschedule": w.can_reschedule}  # fmt: skip


def _maintenance_text(w: MaintenanceWindow | None, now: datetime) -> str | None:
    """`maintenance in 2d 3h`, or `in maintenance` once its window began; None without one."""
    if w is None:
        return None
    if w.status == "ONGOING" or (w.start is not None and w.start <= now):
        return "in maintenance"
    return "maintenance in ?" if w.start is None else f"maintenance in {duration(w.start - now)}"


def _row(f: FleetStatus, s: SlotStatus, now: datetime) -> list[str]:
    node = s.node
    live = node is not None and node.phase in LIVE_PHASES
    phase = node.phase.value if node is not None else NONE
    if s.slot.done and not live:
        phase = "done"  # finished for good: the deleted node is not a problem to look into
    elif waiting_for_capacity(s, f.fleet.down):
        phase = "waiting for capacity"  # the create failed on a stockout; retrying, not gave up
    elif (since := flex_waiting_since(s, flex_start(f))) is not None:
        phase = f"waiting for flex-start capacity since {clock_time(since)}"
    elif node is not None and node.phase is NodePhase.READY and node.run_ends_at is not None:
        phase = f"ready, run ends in {duration(node.run_ends_at - now)}"
    if live and node is not None and (soon := _maintenance_text(node.maintenance, now)):
        phase = f"{phase}, {soon}"
    uptime = NONE
    if node is not None and node.phase is NodePhase.READY and node.ready_at is not None:
        uptime = duration(now - node.ready_at)
    return [
        _fleet_name(f),
        str(s.slot.index),
        node.node_name if node is not None else NONE,
        location_name(node.project, node.zone) if node is not None else NONE,
        phase,
        _cloud(node),
        _attempt(s),
        str(s.slot.preemptions),
        str(s.slot.failures),
        losses_text(s.losses),
        NONE,  # goodput: `_rows`
        uptime,
        truncate(s.slot.last_error or _zone_error(f, s), LAST_ERROR_WIDTH),
    ]


def losses_text(losses: Mapping[str, int]) -> str:
    """`2 preempted, 1 maintenance`: the slot's losses by cause, the most first (the full
    map is in --json); NONE without any."""
    if not losses:
        return NONE
    ranked = sorted(losses.items(), key=lambda kv: -kv[1])  # stable: the vocabulary's order
    return truncate(", ".join(f"{n} {cause}" for cause, n in ranked), LOSSES_WIDTH)


def _empty_fleet_row(f: FleetStatus) -> list[str]:
    return [_fleet_name(f), *([NONE] * (len(HEADERS) - 1))]


def _fleet_name(f: FleetStatus) -> str:
    return f"{f.fleet.name} (down)" if f.fleet.down else f.fleet.name


def _cloud(node: IncarnationRecord | None) -> str:
    # A terminal node's last observed state (READY before a planned delete) would mislead.
    if node is None or node.cloud_state is None or node.phase not in LIVE_PHASES:
        return NONE
    # HEALTHY is the normal case; only say something when it is not.
    if node.health and node.health != "HEALTHY":
        return f"{node.cloud_state}/{node.health}"
    return node.cloud_state


def _attempt(s: SlotStatus) -> str:
    if s.last_attempt is None:
        return NONE
    return f"{s.last_attempt.number} {_attempt_state(s.last_attempt)}"


def _summary(f: FleetStatus) -> str:
    ready = sum(1 for s in f.slots if _ready(s))
    running = sum(1 for s in f.slots if s.last_attempt and s.last_attempt.outcome is None)
    done = sum(1 for s in f.slots if s.slot.done)
    parts = [
        f"{ready}/{len(f.slots)} ready",
        f"{running} running",
        f"{sum(s.slot.preemptions for s in f.slots)} preemptions",
        f"{sum(s.slot.failures for s in f.slots)} failures",
    ]
    if done:
        parts.append(f"{done} done")
    if f.fleet.down:
        parts.append("down")
    return f"{f.fleet.name}: {', '.join(parts)}"
