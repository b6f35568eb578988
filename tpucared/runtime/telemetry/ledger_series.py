"""The ledger's series on /metrics: `tpucared_slot_seconds_total{fleet,slot,category}` and
`tpucared_cost_dollars_total{fleet,slot,category}` (docs/metrics.md), one per slot and category.

`LedgerSeries` owns them: a Prometheus collector, fed by the metrics refresh after each tick
(metrics.py `refresh`), read when /metrics is scraped. Never a rescan of the store per scrape:

- Incremental. A slot's ledger (core/ledger/tiling.py) only changes shape when its records
  change; otherwise its last interval just grows with the clock. So each slot keeps its
  category totals up to the start of its last interval, and that interval's category; a value
  at any later time is those plus the time since. The refresh compares each slot's part of the
  tick's snapshot (its slot row, its live nodes, its newest attempt, its fleet's `down`) with
  the last one seen, and recomputes only the slots that differ, from their own records (one
  read of that slot's history: store/ledger_reads.py).
- Bounded. At most `BATCH` slots are recomputed per refresh and no more once `BUDGET_S`
  seconds went by; the rest wait for the next refresh (the daemon's start: every slot, so
  10,000 slots fill in over the first refreshes; a slot not computed yet has no series).
  Memory: a few numbers per slot and category.

Counters never go down: where a slot's new records move past seconds from one category to
another (a loss turns the time since the last checkpoint from productive into wasted, a first
step turns the attempt's start into PROGRAM_STARTUP), the new category gets them when they are
known and the old one keeps what it showed. So one slot's series may sum to more than its wall
time by those seconds; `tpucared goodput` reads the exact split from the store.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from tpucared.core.ledger.categories import Category
from tpucared.core.ledger.cost import Prices
from tpucared.inspect.ledger import ledgers
from tpucared.store import Store
from tpucared.store.ledger_reads import LedgerRecords
from tpucared.store.snapshot import SlotKey, Snapshot

LABELS = ("fleet", "slot", "category")
SECONDS = ("tpucared_slot_seconds", "Wall time of a slot per ledger category (tpucared goodput)")
DOLLARS = ("tpucared_cost_dollars", "What a slot's time cost per ledger category, where priced")
BATCH = 200  # slots recomputed per refresh, at most
BUDGET_S = 0.25  # and no more once this long went by


@dataclass
class _Slot:
    seen: object  # the slot's part of the snapshot when last computed
    base: dict[Category, float] = field(default_factory=dict)  # up to `open_at`
    open_category: Category | None = None
    open_at: datetime | None = None
    floor: dict[Category, float] = field(default_factory=dict)  # what counters showed above
    per_second: float | None = None  # $ per second of the slot; None: unpriced

    def values(self, now: datetime) -> dict[Category, float]:
        out = dict(self.base)
        if self.open_category is not None and self.open_at is not None:
            grown = max(0.0, (now - self.open_at).total_seconds())
            out[self.open_category] = out.get(self.open_category, 0.0) + grown
        for category, extra in self.floor.items():
            out[category] = out.get(category, 0.0) + extra
        return out


class LedgerSeries(Collector):
    def __init__(self, prices: Prices | None = None) -> None:
        self.prices = prices or Prices()
        self._slots: dict[SlotKey, _Slot] = {}
        self._dirty: dict[SlotKey, object] = {}  # to recompute, with what was seen
        self._snapshot: Snapshot | None = None
        self._now: datetime | None = None  # the last refresh's time: what series show
        self.recomputed = 0  # slots recomputed so far (tests, docs/benchmarks)

    async def update(self, store: Store, snapshot: Snapshot, now: datetime) -> int:
        """Note the slots whose records changed since the last refresh, recompute a bounded
        batch of them; the series then show the figures as of `now`. Returns how many."""
        if snapshot is not self._snapshot:
            self._note_changes(snapshot)
            self._snapshot = snapshot
        if not self._dirty:
            self._now = now
            return 0
        started = time.monotonic()
        done = 0
        async with store.read() as r:
            for key in list(self._dirty)[:BATCH]:
                records = await r.ledger(key[0], key[1])
                self._recompute(key, records, now, self._now)
                done += 1
                if time.monotonic() - started > BUDGET_S:
                    break
        self.recomputed += done
        self._now = now
        return done

    def _note_changes(self, snapshot: Snapshot) -> None:
        nodes: dict[SlotKey, list[object]] = {}
        for (name, index, _), inc in snapshot.nodes.items():
            nodes.setdefault((name, index), []).append(inc)
        for key, slot in snapshot.slots.items():
            fleet = snapshot.fleets.get(key[0])
            seen = (slot, fleet.down if fleet else None, tuple(nodes.get(key, ())),
                    snapshot.last_attempts.get(key))  # fmt: skip
            known = self._slots.get(key)
            if known is None or known.seen != seen:
                self._dirty[key] = seen
        for key in [k for k in self._slots if k not in snapshot.slots]:
            del self._slots[key]  # a fleet removed, a slot beyond a shrunk size
        for key in [k for k in self._dirty if k not in snapshot.slots]:
            del self._dirty[key]

    def recompute(self, key: SlotKey, records: LedgerRecords, now: datetime) -> None:
        """The slot's figures from its records (`Reader.ledger` of that slot) as of `now`."""
        shown_at, self._now = self._now, now
        self._recompute(key, records, now, shown_at)

    def _recompute(
        self, key: SlotKey, records: LedgerRecords, now: datetime, shown_at: datetime | None
    ) -> None:
        seen = self._dirty.pop(key, None)
        fleets = ledgers(records, self.prices, now, None)
        rows = [row for f in fleets for row in f.slots if row.summary.slot == key[1]]
        fresh = _Slot(seen)
        if rows:
            row = rows[0]
            summary = row.summary
            per_hour = summary.dollars(3600.0)
            fresh.per_second = per_hour / 3600 if per_hour is not None else None
            fresh.base = dict(summary.seconds)
            if row.intervals:
                last = row.intervals[-1]
                fresh.base[last.category] -= last.seconds
                fresh.open_category, fresh.open_at = last.category, last.start
        old = self._slots.get(key)
        if old is not None and shown_at is not None:
            # What its counters showed (at the last refresh), never less from now on.
            before, after = old.values(shown_at), fresh.values(now)
            fresh.floor = {c: v - after.get(c, 0.0) for c, v in before.items()
                           if v > after.get(c, 0.0)}  # fmt: skip
        self._slots[key] = fresh

    def values(self) -> Mapping[SlotKey, dict[Category, float]]:
        """Every computed slot's seconds per category as of the last refresh."""
        now = self._now
        if now is None:
            return {}
        return {key: s.values(now) for key, s in self._slots.items()}

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        seconds, dollars = self._families()
        now = self._now
        if now is None:
            return seconds, dollars
        for (fleet, slot), s in self._slots.items():
            label = str(slot)
            for category, value in s.values(now).items():
                if value <= 0:
                    continue
                labels = [fleet, label, category.value]
                seconds.add_metric(labels, value)
                if s.per_second is not None:
                    dollars.add_metric(labels, value * s.per_second)
        return seconds, dollars

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, CounterMetricFamily]:
        return (
            CounterMetricFamily(*SECONDS, labels=LABELS),
            CounterMetricFamily(*DOLLARS, labels=LABELS),
        )
