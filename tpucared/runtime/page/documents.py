"""The page's JSON (runtime/page/): /v1/overview, /v1/slots and /v1/slots/{fleet}/{slot}, the
documents the templates render and the page's JavaScript polls; scripts get the same data.

Built from what `tpucared status --json` and `tpucared goodput --json` already build
(inspect/status.py, inspect/ledger.py, inspect/events.py): a slot's node and attempt are the
status document's, its timeline the goodput document's intervals. Versioned like /v1/status:
keys only grow (docs/status.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.records import EventRecord, IncarnationRecord, WorkloadAttemptRecord
from tpucared.inspect.events import event_document
from tpucared.inspect.fmt import duration, iso
from tpucared.inspect.ledger import FleetLedger, goodput_document
from tpucared.inspect.status import _attempt_doc, _maintenance_doc, _node_doc
from tpucared.runtime.page.ledger_cache import Today
from tpucared.store.page_reads import NO_NODE, PageRow

PAGE_VERSION = 1
WAITING_SHOWN = 20  # the capacity hunt lists this many waiting slots per fleet


def overview_document(status: Mapping[str, Any], today: Today | None) -> dict[str, Any]:
    """The overview from the /v1/status document: per fleet its slots by state, the slots that
    wait for capacity (since when, where they try next), the failing zones, the leader, and
    the ledger's headline for today."""
    fleets = []
    for f in status["fleets"]:
        states: Counter[str] = Counter()
        waiting = []
        for s in f["slots"]:
            node = s["node"]
            states[node["phase"] if node else NO_NODE] += 1
            if s["waiting_for_capacity"] or s["waiting_for_flex_start_since"]:
                waiting.append(
                    {
                        "slot": s["slot"],
                        "since": s["waiting_for_flex_start_since"]
                        or (node["requested_at"] if node else None),
                        "next_zone": s["next_zone"],
                        "next_create_at": s["next_create_at"],
                        "create_failures": s["create_failures"],
                        "last_error": s["last_error"],
                    }
                )
        fleets.append(
            {
                "name": f["name"],
                "down": f["down"],
                "slots": len(f["slots"]),
                "states": dict(sorted(states.items())),
                "waiting": len(waiting),
                "waiting_slots": waiting[:WAITING_SHOWN],
                "failing_zones": f["failing_zones"],
            }
        )
    return {
        "version": PAGE_VERSION,
        "generated_at": status["generated_at"],
        "leader": status["leader"],
        "fleets": fleets,
        "zones": status["zones"],
        "ledger": _ledger_doc(today),
    }


def _ledger_doc(today: Today | None) -> dict[str, Any]:
    if today is None:
        return {"as_of": None, "since": None, "headline": None}
    return {"as_of": iso(today.as_of), "since": iso(today.since), "headline": today.headline}


def slot_row(row: PageRow, now: datetime, today: Today | None) -> dict[str, Any]:
    """One row of the slot table."""
    node, slot = row.node, row.slot
    day = today.slots.get((slot.fleet, slot.index)) if today is not None else None
    up = None
    if node is not None and node.phase in LIVE_PHASES and node.ready_at is not None:
        up = max(0.0, (now - node.ready_at).total_seconds())
    return {
        "fleet": slot.fleet,
        "slot": slot.index,
        "state": node.phase.value if node is not None else NO_NODE,
        "node": None if node is None else node.node_name,
        "zone": None if node is None else node.zone,
        "cloud_state": None if node is None else node.cloud_state,
        "attempt": None if row.attempt is None else _attempt_brief(row.attempt),
        "uptime_s": up,
        "uptime": None if up is None else duration(timedelta(seconds=up)),
        "lost_today_s": None if day is None else day.lost_s,
        "goodput_today": None if day is None else day.goodput,
        "maintenance": None if node is None else _maintenance_doc(node.maintenance),
        "preemptions": slot.preemptions,
        "last_error": slot.last_error,
    }


def _attempt_brief(a: WorkloadAttemptRecord) -> dict[str, Any]:
    doc = _attempt_doc(a)
    return {"number": doc["number"], "state": doc["state"], "exit_codes": doc["exit_codes"]}


def slots_document(
    rows: Sequence[PageRow],
    *,
    total: int,
    offset: int,
    limit: int,
    query: Mapping[str, Any],
    now: datetime,
    today: Today | None,
) -> dict[str, Any]:
    return {
        "version": PAGE_VERSION,
        "generated_at": iso(now),
        "query": dict(query),
        "total": total,
        "offset": offset,
        "limit": limit,
        "ledger": _ledger_doc(today),
        "slots": [slot_row(r, now, today) for r in rows],
    }


def slot_document(
    row: PageRow,
    *,
    incarnations: Sequence[IncarnationRecord],
    attempts: Sequence[WorkloadAttemptRecord],
    events: Sequence[EventRecord],
    ledger: Sequence[FleetLedger],
    since: datetime,
    now: datetime,
    config_path: str,
    today: Today | None,
) -> dict[str, Any]:
    """One slot: its row, its timeline since `since` (the ledger's intervals), incarnations
    with their causes of loss, attempts with exit codes, recent events, commands to copy."""
    fleet, index = row.slot.fleet, row.slot.index
    goodput = goodput_document(ledger, now, since, iso(since) or "")
    slot_docs = [s for f in goodput["fleets"] for s in f["slots"] if s["slot"] == index]
    timeline = slot_docs[0] if slot_docs else None
    where = f"{fleet}/{index}"
    return {
        "version": PAGE_VERSION,
        "generated_at": iso(now),
        "slot": slot_row(row, now, today),
        "timeline": {
            "since": iso(since),
            "until": iso(now),
            "wall_s": None if timeline is None else timeline["wall_s"],
            "lost_s": None if timeline is None else timeline["lost_s"],
            "goodput": None if timeline is None else timeline["goodput"],
            "intervals": [] if timeline is None else timeline["intervals"],
        },
        "incarnations": [
            {**_node_doc(n, ()), "loss_cause": None if n.loss_cause is None else n.loss_cause.value}
            for n in incarnations
        ],
        "attempts": [_attempt_doc(a) for a in attempts],
        "events": [event_document(e) for e in events],
        "commands": {
            "logs": f"tpucared logs -c {config_path} {where} --follow",
            "exec": f"tpucared exec -c {config_path} {where} -- hostname",
        },
    }
