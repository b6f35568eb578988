"""The first snapshot of a new leader, cold and warm (issue 15: "standbys keep their caches
warm"), measured inside bench/writerate.py on its 10,000-node databases.

A term that takes over reads the store's snapshot at its first tick. Cold: a store that never
read (a new process, or a standby that kept nothing warm), so every row of every live node,
slot, worker and attempt is turned into a record (store/cache.py). Warm: a standby store that
read the snapshot at its last poll (runtime/terms.py `keep_warm`), after which the leader wrote
one quiet tick (1% of the nodes' cloud facts): only those rows are turned again. Each figure is
the median of `rounds` fresh stores (cold) or fresh standby stores each warmed once (warm).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from bench import writerate_work as work
from tpucared.core.model.records import IncarnationRecord

POLL_S = 10.0


async def first_snapshot(
    leader: work.Leader, nodes: Sequence[IncarnationRecord], changed: int, rounds: int
) -> dict[str, Any]:
    url = leader.store.engine.url
    cold: list[float] = []
    warm: list[float] = []
    for r in range(rounds):
        fresh = work.TimedStore.at(url)
        try:
            cold.append(await _timed_read(fresh))
        finally:
            await fresh.close()
        standby = work.TimedStore.at(url)
        try:
            await standby.load_snapshot()  # its last poll as a standby
            now = work.T0 + timedelta(days=1, seconds=POLL_S * r)
            await work.executor(leader.store).execute(
                work.quiet_plan(nodes, 1000 + r, changed, now)
            )
            warm.append(await _timed_read(standby))
        finally:
            await standby.close()
    return {
        "cold_ms": round(statistics.median(cold) * 1000, 1),
        "warm_ms": round(statistics.median(warm) * 1000, 1),
        "rounds": rounds,
        "changed_rows": changed,
    }


async def _timed_read(store: work.TimedStore) -> float:
    start = time.perf_counter()
    await store.load_snapshot()
    return time.perf_counter() - start
