"""Micro-benchmark of the metrics refresh after each tick: `python -m bench.metrics_refresh
[--slots 10000] [--repeat 15]`. In process, no store, no daemon: seconds, not minutes.

What it times (median of `--repeat` calls, each 2 s of daemon time after the last):

- `DaemonMetrics.set_nodes(snapshot, now)`, the part of `refresh` after the store read, on a
  fleet like the scale benchmark's (`bench.scale`): N single-host nodes READY, 4 fleets of
  N/4, no workload, so every slot is productive and every slot's time grows every tick;
  - `same snapshot`: nothing written since the last refresh (the store returns the very
    snapshot object it returned then: a steady fleet),
  - `0 changed`: a new snapshot object of the same records (something was written that the
    slots do not show, e.g. an event; the store reuses unchanged rows' records),
  - `1 changed`: one node goes READY <-> DEAD between two refreshes,
  - `all changed`: every node does;
- `render()`, one scrape of /metrics, at the end;
- and the memory the metrics hold after two refreshes (`tracemalloc`, after the timings).

It uses only `DaemonMetrics()`, `set_nodes` and `render`, so an older tree runs it as well:
copy this file into it and run it there for the "before" figures (docs/benchmarks.md).
Not part of `bench.run`: it measures one function, not the daemon.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tpucared.core.model.records import FleetRecord, IncarnationRecord, NodePhase, SlotRecord
from tpucared.runtime.telemetry.metrics import DaemonMetrics
from tpucared.store.snapshot import SlotKey, Snapshot, frozen_mapping

T0 = datetime(2025, 6, 1, tzinfo=UTC)
FLEETS = 4


def fleet(slots: int) -> Snapshot:
    fleets = {}
    for f in range(FLEETS):
        name = f"fleet-{f}"
        spec = f'{{"name": "{name}", "workload": null}}'
        fleets[name] = FleetRecord(name, f"hash-{f}", spec, T0)
    records: dict[SlotKey, SlotRecord] = {}
    nodes: dict[SlotKey, IncarnationRecord] = {}
    for i in range(slots):
        name, index = f"fleet-{i % FLEETS}", i // FLEETS
        records[name, index] = SlotRecord(name, index, f"{name}-{index}")
        nodes[name, index] = IncarnationRecord(
            i + 1, name, index, f"{name}-{index}", "z", "v5litepod-8", NodePhase.READY, T0, T0
        )
    return Snapshot(
        fleets=frozen_mapping(fleets), slots=frozen_mapping(records), nodes=frozen_mapping(nodes)
    )


def flipped(base: Snapshot, keys: list[SlotKey], dead: bool) -> Snapshot:
    """`base` with the nodes of `keys` DEAD (or READY again); other records shared."""
    phase = NodePhase.DEAD if dead else NodePhase.READY
    nodes = dict(base.nodes)
    for key in keys:
        nodes[key] = replace(nodes[key], phase=phase)
    return replace(base, nodes=frozen_mapping(nodes))


def timed(slots: int, repeat: int, snapshots: Callable[[int], Snapshot]) -> float:
    """Median seconds of `set_nodes` on `snapshots(i)`, after two warm-up refreshes."""
    m = DaemonMetrics()
    now = T0
    for i in (-2, -1):
        m.set_nodes(snapshots(i), now)
        now += timedelta(seconds=2)
    samples = []
    for i in range(repeat):
        snap = snapshots(i)  # built outside the timing, as the store read is
        now += timedelta(seconds=2)
        start = time.perf_counter()
        m.set_nodes(snap, now)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slots", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    gc.set_threshold(100_000)  # as the daemon runs (cli/daemon.py)
    base = fleet(args.slots)
    keys = list(base.slots)
    one, every = {}, {}
    for dead in (False, True):
        one[dead] = flipped(base, keys[:1], dead)
        every[dead] = flipped(base, keys, dead)
    cases: list[tuple[str, Callable[[int], Snapshot]]] = [
        ("same snapshot", lambda i: base),
        ("0 changed", lambda i: replace(base)),
        ("1 changed", lambda i: one[i % 2 == 0]),
        ("all changed", lambda i: every[i % 2 == 0]),
    ]
    print(f"metrics refresh, {args.slots} slots, median of {args.repeat}")
    for label, snapshots in cases:
        print(f"  set_nodes, {label:<13} {timed(args.slots, args.repeat, snapshots) * 1e3:9.3f} ms")
    m = DaemonMetrics()
    m.set_nodes(base, T0)
    m.set_nodes(base, T0 + timedelta(seconds=2))
    renders = []
    for _ in range(max(3, args.repeat // 3)):
        start = time.perf_counter()
        m.render()
        renders.append(time.perf_counter() - start)
    print(f"  render (one scrape)     {statistics.median(renders) * 1e3:9.3f} ms")
    del m
    gc.collect()
    tracemalloc.start()
    m = DaemonMetrics()
    m.set_nodes(base, T0)
    m.set_nodes(base, T0 + timedelta(seconds=2))
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"  memory held             {held / 1e6:9.1f} MB")


if __name__ == "__main__":
    main()
