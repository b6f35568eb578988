"""The per-slot goodput series: `tpucared_slot_goodput_ratio`, `tpucared_slot_wall_seconds_total`
and `tpucared_slot_productive_seconds_total` (docs/metrics.md), one series per slot.

`SlotSeries` owns them. It is a Prometheus collector: it writes nothing when the daemon
refreshes its metrics, and builds the three families from `GoodputTracker` when /metrics is
scraped. Why not three `prometheus_client` families updated after each tick: every counted
slot's wall time grows every tick (so does the productive time of every productive slot, and
the ratio of most), so pushed values cost a `labels()` lookup and a write per slot and tick
whatever changed: ~40,000 label lookups a tick at 10,000 slots, a third of the daemon's CPU.
The tracker keeps each slot's totals at its last change and the state since (`update` rewrites
only what changed); the values at the last refresh are computed from those on a scrape, which
writes a line per series anyway.

What a scraper sees is what the three families showed, value for value: the figures as of the
last refresh (not the scrape), the series of every slot of the last snapshot in the order the
slots first appeared, removed when a slot leaves the database (a fleet removed, a slot beyond
a shrunk size) and starting again from zero if it comes back, and each counter's `_created`
(the time of the refresh that first saw the slot, like a labelled child's creation time).
tests/runtime/telemetry/test_metrics_refresh.py compares the exposition with the families it
replaces.

`collect` runs on the event loop (the /metrics handler) like the refresh, never in between a
refresh's writes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime

from prometheus_client import metrics as _prometheus_metrics
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tpucared.inspect.goodput import GoodputTracker
from tpucared.store.snapshot import SlotKey, Snapshot

LABELS = ("fleet", "slot")
GOODPUT = ("tpucared_slot_goodput_ratio", "Productive / wall time")
WALL = ("tpucared_slot_wall_seconds", "Wall time accounted")
PRODUCTIVE = ("tpucared_slot_productive_seconds", "Productive time")


class SlotSeries(Collector):
    def __init__(self) -> None:
        self.tracker = GoodputTracker()
        # When each slot's series appeared (Unix time), for the counters' `_created`.
        self._created: dict[SlotKey, float] = {}
        # The label values of each slot, made once: a scrape would otherwise format 10,000
        # slot numbers.
        self._labels: dict[SlotKey, list[str]] = {}

    def update(self, snapshot: Snapshot, now: datetime) -> set[SlotKey]:
        """Credit goodput time up to `now`; returns the slots whose series changed other than
        by the passing of time (new, changed state, removed)."""
        touched = self.tracker.update(snapshot, now)
        for key in touched:
            if key not in self.tracker:  # left
                self._created.pop(key, None)
                self._labels.pop(key, None)
            elif key not in self._created:  # new (time.time(): what prometheus_client uses)
                self._created[key] = time.time()
                self._labels[key] = [key[0], str(key[1])]
        return touched

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        ratio, wall, productive = self._families()
        # prometheus_client's switch for `_created` (PROMETHEUS_DISABLE_CREATED_SERIES or
        # disable_created_metrics()): honoured as its own counters honour it.
        created = getattr(_prometheus_metrics, "_use_created", True)
        for key, t in self.tracker.times():
            labels = self._labels[key]
            at = self._created[key] if created else None
            wall.add_metric(labels, t.wall_s, created=at)
            productive.add_metric(labels, t.productive_s, created=at)
            ratio.add_metric(labels, t.ratio)
        return ratio, wall, productive

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, CounterMetricFamily, CounterMetricFamily]:
        return (
            GaugeMetricFamily(*GOODPUT, labels=LABELS),
            CounterMetricFamily(*WALL, labels=LABELS),
            CounterMetricFamily(*PRODUCTIVE, labels=LABELS),
        )
