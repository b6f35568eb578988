"""`tpucared goodput`'s figures and output: each slot's badput ledger (core/ledger) from the
store's records (store/ledger_reads.py), summed per slot and per fleet, priced with the
config's `[prices]`, as a table for people and a JSON document for scripts.

A slot's chips are its type's (core/ledger/cost.py `chips`) times its hosts (a multi-host
`compute` topology) times its slices; its type and capacity kind are the fleet's stored spec's
(the newest node's type when the spec does not say, as in records written before it did).

A slot's closed days kept by the daemon (`records.kept`, core/ledger/kept.py) are summed as
they are, and only the records after them are tiled (with `since` before them, the part of
its day before the next midnight too: `records.head`): the figures are the same as tiling
everything (kept.py says why); the `intervals` are only the tiled ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from tpucared.core.ledger.categories import LOST, Category, Interval, SlotHistory
from tpucared.core.ledger.cost import (
    Prices,
    SlotSummary,
    chips,
    combined,
    headline,
    money,
    summarize,
    top_causes,
)
from tpucared.core.ledger.tiling import clipped, slot_ledger
from tpucared.core.model.causes import LossCause
from tpucared.core.model.machines import hosts_of
from tpucared.core.model.records import FleetRecord, SlotRecord
from tpucared.inspect.fmt import NONE, clock_time, iso, table
from tpucared.store.ledger_reads import LedgerRecords
from tpucared.store.snapshot import SlotKey


@dataclass(frozen=True)
class FleetFacts:
    """What the ledger needs of a fleet's stored spec."""

    workload: bool
    accelerator_type: str | None
    capacity: str
    chips_per_slot: int | None


@dataclass(frozen=True)
class SlotLedger:
    summary: SlotSummary
    intervals: Sequence[Interval]  # after `kept_until` when days are kept
    start: datetime | None = None  # where its figures begin: its first create, or `since`
    kept_until: datetime | None = None  # its days before this are summed, not tiled


@dataclass(frozen=True)
class FleetLedger:
    fleet: str
    facts: FleetFacts
    price: float | None  # $ per chip-hour
    slots: Sequence[SlotLedger]


def fleet_facts(fleet: FleetRecord, newest_type: str | None) -> FleetFacts:
    try:
        spec = json.loads(fleet.spec_json)
    except ValueError:
        spec = {}
    spec = spec if isinstance(spec, dict) else {}
    kind = spec.get("accelerator_type") or newest_type
    slices: int = spec["slices"] if isinstance(spec.get("slices"), int) else 1
    node: dict[str, Any] = spec["node"] if isinstance(spec.get("node"), dict) else {}
    per_node = chips(kind) if isinstance(kind, str) else None
    hosts = hosts_of(kind, node.get("topology")) if isinstance(kind, str) else None
    total = per_node * (hosts or 1) * max(1, slices) if per_node is not None else None
    return FleetFacts(
        workload=spec.get("workload", {"unknown": True}) is not None,
        accelerator_type=kind if isinstance(kind, str) else None,
        capacity=str(spec.get("capacity") or "spot"),
        chips_per_slot=total,
    )


def slot_history(
    records: LedgerRecords, fleet: FleetRecord, slot: SlotRecord, facts: FleetFacts
) -> SlotHistory:
    """What the ledger tiles of one slot read (the maintenance task's kept days too)."""
    key = (fleet.name, slot.index)
    return SlotHistory(
        fleet.name,
        slot.index,
        nodes=records.nodes.get(key, []),
        attempts=records.attempts.get(key, []),
        creates=records.creates.get(key, []),
        workload=facts.workload,
        done=slot.done or fleet.down,
        held_since=slot.held_since,
        capacity=facts.capacity,
        start=records.first_create.get(key),
    )


def fleets_read(
    records: LedgerRecords,
) -> Iterator[tuple[str, FleetRecord, list[SlotRecord], FleetFacts]]:
    """Each fleet read, with its slots read and its facts (its type: the spec's, else its
    newest node's)."""
    for name, fleet in records.fleets.items():
        slots = [s for s in records.slots if s.fleet == name]
        newest = None
        for slot in slots:
            nodes = records.nodes.get((name, slot.index), [])
            newest = nodes[-1].accelerator_type if nodes else newest
        yield name, fleet, slots, fleet_facts(fleet, newest)


def ledgers(
    records: LedgerRecords, prices: Prices, now: datetime, since: datetime | None
) -> list[FleetLedger]:
    """Every slot read, its ledger clipped to [since, now], grouped by fleet."""
    out = []
    for name, fleet, slots, facts in fleets_read(records):
        price = (
            prices.per_chip_hour(facts.accelerator_type, facts.capacity)
            if facts.accelerator_type
            else None
        )
        rows = []
        for slot in slots:
            key = (name, slot.index)
            history = slot_history(records, fleet, slot, facts)
            intervals = slot_ledger(history, now)
            kept_until = records.kept_until.get(key)
            if kept_until is not None:
                intervals = [
                    *_head(records, fleet, slot, facts, since),
                    *clipped(intervals, kept_until, keep_steps=False),
                ]
            elif since is not None:
                intervals = clipped(intervals, since)
            summary = summarize(
                name,
                slot.index,
                intervals,
                chips=facts.chips_per_slot,
                price=price,
                kept=records.kept.get(key) if kept_until is not None else None,
            )
            first = history.first
            start = max(first, since) if first and since and first < now else first
            if start is not None and start >= now:
                start = None
            rows.append(SlotLedger(summary, intervals, start, kept_until))
        out.append(FleetLedger(name, facts, price, rows))
    return out


def _head(
    records: LedgerRecords,
    fleet: FleetRecord,
    slot: SlotRecord,
    facts: FleetFacts,
    since: datetime | None,
) -> list[Interval]:
    """The intervals of [since, the next midnight) before the kept days (`records.head`).
    Tiled to that midnight with neither `done` nor a hold: both reach back no further than
    the slot's latest disruption or the hold's start, never before its kept days' end."""
    head, until = records.head, records.head_until
    if since is None or head is None or until is None:
        return []
    history = replace(slot_history(head, fleet, slot, facts), done=False, held_since=None)
    return clipped(slot_ledger(history, until), since)


def shares(fleets: Sequence[FleetLedger]) -> dict[SlotKey, float]:
    """Each slot's productive share of its time (`tpucared status`'s GOODPUT), where it has
    any time."""
    return {
        (f.fleet, row.summary.slot): row.summary.share
        for f in fleets
        for row in f.slots
        if row.summary.total_s > 0
    }


def fleet_total(fleet: FleetLedger) -> SlotSummary:
    """The fleet's slots summed, as one summary (slot -1)."""
    return combined(
        fleet.fleet,
        (row.summary for row in fleet.slots),
        chips=fleet.facts.chips_per_slot,
        price=fleet.price,
    )


def cause_name(cause: LossCause | None) -> str:
    return cause.value if cause is not None else "none recorded"


def goodput_lines(fleets: Sequence[FleetLedger], since_text: str) -> list[str]:
    lines: list[str] = []
    for fleet in fleets:
        facts = fleet.facts
        price = f"{money(fleet.price)} per chip-hour" if fleet.price is not None else "unpriced"
        chips_text = (
            f"{facts.chips_per_slot} chips a slot" if facts.chips_per_slot else "chips unknown"
        )
        lines.append(
            f"fleet {fleet.fleet}: {facts.accelerator_type or NONE} {facts.capacity}, "
            f"{chips_text}, {price}"
        )
        rows: list[list[str]] = []
        total = [SlotLedger(fleet_total(fleet), ())] if len(fleet.slots) > 1 else []
        for row in [*fleet.slots, *total]:
            rows.extend(_category_rows(row.summary))
        lines.extend("  " + line for line in table(_HEADERS, rows))
        causes = top_causes([fleet_total(fleet)])
        if causes:
            lines.append(
                "  top causes of loss: "
                + ", ".join(f"{cause_name(c)} {_seconds(s)} s" for c, s in causes)
            )
        lines.append("")
    summaries = [row.summary for fleet in fleets for row in fleet.slots]
    lines.append(headline(summaries, since_text))
    return lines


_HEADERS = ("SLOT", "CATEGORY", "SECONDS", "SHARE", "DOLLARS", "SUB-PHASES (s)")


def _category_rows(summary: SlotSummary) -> list[list[str]]:
    slot = "all" if summary.slot < 0 else str(summary.slot)
    total = summary.total_s
    rows = []
    for category in (Category.PRODUCTIVE, *LOST):
        seconds = summary.seconds.get(category, 0.0)
        if seconds <= 0:
            continue
        dollars = summary.dollars(seconds)
        phases = ", ".join(
            f"{phase.value} {_seconds(s)}"
            for (c, phase), s in summary.phases.items()
            if c is category and phase is not None and s > 0
        )
        if category is Category.WASTED and summary.steps_lost:
            phases = f"{summary.steps_lost:,} steps lost"
        rows.append(
            [
                slot,
                category.value,
                _seconds(seconds),
                f"{seconds / total:.1%}" if total > 0 else NONE,
                money(dollars) if dollars is not None else NONE,
                phases or NONE,
            ]
        )
    return rows or [[slot, "(no time: never created)", "0", NONE, NONE, NONE]]


def _seconds(value: float) -> str:
    return f"{round(value):,}"


def goodput_document(
    fleets: Sequence[FleetLedger], now: datetime, since: datetime | None, since_text: str
) -> dict[str, Any]:
    """The `--json` document (docs/inspecting.md, "Where the time went")."""
    summaries = [row.summary for fleet in fleets for row in fleet.slots]
    return {
        "now": iso(now),
        "since": iso(since),
        "headline": headline(summaries, since_text),
        "fleets": [
            {
                "fleet": fleet.fleet,
                "accelerator_type": fleet.facts.accelerator_type,
                "capacity": fleet.facts.capacity,
                "chips_per_slot": fleet.facts.chips_per_slot,
                "price_per_chip_hour": fleet.price,
                "total": _summary_document(fleet_total(fleet)),
                "slots": [
                    {
                        "slot": row.summary.slot,
                        **_summary_document(row.summary),
                        "kept_until": iso(row.kept_until),
                        "intervals": [_interval_document(i) for i in row.intervals],
                    }
                    for row in fleet.slots
                ],
            }
            for fleet in fleets
        ],
    }


def _summary_document(summary: SlotSummary) -> dict[str, Any]:
    total = summary.total_s
    categories: dict[str, Any] = {}
    for category, seconds in summary.seconds.items():
        phases: Mapping[str, float] = {
            p.value: s for (c, p), s in summary.phases.items() if c is category and p is not None
        }
        categories[category.value] = {
            "seconds": seconds,
            "share": seconds / total if total > 0 else None,
            "chip_hours": summary.chip_hours(seconds),
            "dollars": summary.dollars(seconds),
            "phases": dict(phases),
        }
    return {
        "wall_s": total,
        "lost_s": summary.lost_s,
        "goodput": summary.share if total > 0 else None,
        "dollars": summary.dollars(total),
        "lost_dollars": summary.dollars(summary.lost_s),
        "steps_lost": summary.steps_lost,
        "categories": categories,
        "top_causes": [
            {"cause": c.value if c is not None else None, "seconds": s}
            for c, s in top_causes([summary])
        ],
    }


def _interval_document(i: Interval) -> dict[str, Any]:
    return {
        "start": iso(i.start),
        "end": iso(i.end),
        "seconds": i.seconds,
        "category": i.category.value,
        "phase": i.phase.value if i.phase is not None else None,
        "cause": i.cause.value if i.cause is not None else None,
        "zone": i.zone,
        "node": i.node,
        "steps": i.steps,
    }


def since_text(since: datetime | None, fleets: Sequence[FleetLedger]) -> str:
    """What the headline says the figures run from: `since`, else the first create."""
    if since is not None:
        return clock_time(since)
    starts = [row.start for fleet in fleets for row in fleet.slots if row.start is not None]
    return clock_time(min(starts)) if starts else "the start"
