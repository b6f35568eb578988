"""The scale benchmark's `storm` variant: a zone's worth of spot capacity reclaimed at once.

While the window's ticks run, a seeded driver in the benchmark process (not the daemon's, not
the emulator's: neither CPU figure includes it) preempts `rate` of the fleet every poll
through the emulator's control API (`:preempt`), picking at random among the nodes it has not
preempted in the last `REST_S` seconds (a node the daemon is still replacing is usually not
READY: its preempt is refused and not counted). After the window it stops, and the benchmark
waits for every slot to be READY again.

What it adds to the row (`storm_figures`):
- preemptions made, and for each the delay to the daemon's DELETE of that node (the first
  DELETE of its path in the emulator's request log after the preempt): median, p90, max, and
  how many got none within the window;
- recovery: from the storm's end to every slot READY in the daemon's database, and the
  creates a minute the daemon sustained meanwhile.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench import common
from bench.scale_procs import PROJECT, fleet_layout

REST_S = 60.0  # a node preempted is not picked again for this long
STORM_SEED = 31


class Storm:
    """Preempt `rate` of the fleet every `every` seconds, from a thread, until `stop()`."""

    def __init__(
        self, url: str, size: int, *, every: float, rate: float = 0.01, seed: int = STORM_SEED
    ) -> None:
        self._url = url
        self._names = [
            (zone, f"{fleet}-{slot}")
            for fleet, zone, slots in fleet_layout(size)
            for slot in range(slots)
        ]
        self._every = every
        self._per_round = max(1, round(size * rate))
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="storm", daemon=True)
        self.preempted: list[tuple[str, str, float]] = []  # (zone, node, epoch seconds)
        self.refused = 0
        self.started_at = 0.0
        self.ended_at = 0.0

    def start(self) -> None:
        self.started_at = time.time()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.ended_at = time.time()

    def _run(self) -> None:
        recent: dict[str, float] = {}
        while not self._stop.is_set():
            began = time.monotonic()
            now = time.time()
            fresh = [(z, n) for z, n in self._names if now - recent.get(n, -REST_S) >= REST_S]
            for zone, name in self._rng.sample(fresh, min(self._per_round, len(fresh))):
                if self._preempt(zone, name):
                    recent[name] = time.time()
                    self.preempted.append((zone, name, recent[name]))
                else:
                    self.refused += 1
            self._stop.wait(max(0.0, self._every - (time.monotonic() - began)))

    def _preempt(self, zone: str, name: str) -> bool:
        path = f"/_emulator/v1/projects/{PROJECT}/locations/{zone}/nodes/{name}:preempt"
        request = urllib.request.Request(self._url + path, data=b"{}", method="POST")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                json.load(response)
        except (urllib.error.URLError, OSError, ValueError):
            return False  # not READY (being replaced), or the emulator busy: not counted
        return True


def delete_delays(
    preempted: Sequence[tuple[str, str, float]], requests: Sequence[Mapping[str, Any]]
) -> tuple[list[float], int]:
    """For each preemption, seconds to the first DELETE of that node after it; and how many
    preemptions saw none in `requests`."""
    deletes: dict[str, list[float]] = {}
    for r in requests:
        if r["method"] == "DELETE" and "/nodes/" in r["path"]:
            deletes.setdefault(str(r["path"]).rsplit("/", 1)[1], []).append(float(r["time"]))
    delays, missing = [], 0
    for _zone, name, at in preempted:
        after = [t for t in deletes.get(name, ()) if t >= at]
        if after:
            delays.append(min(after) - at)
        else:
            missing += 1
    return delays, missing


def storm_figures(
    storm: Storm,
    requests: Sequence[Mapping[str, Any]],
    recovered_at: float | None,
    creates_after: int,
) -> dict[str, Any]:
    delays, missing = delete_delays(storm.preempted, requests)
    recovery = None if recovered_at is None else round(recovered_at - storm.ended_at, 1)
    minutes = (recovery or 0.0) / 60
    return {
        "preempted": len(storm.preempted),
        "refused": storm.refused,
        "per_round": storm._per_round,
        "storm_s": round(storm.ended_at - storm.started_at, 1),
        "delete_delay_s": _summary(delays),
        "delete_missing": missing,
        "recovery_s": recovery,
        "creates_per_minute_recovering": round(creates_after / minutes, 1) if minutes else None,
    }


def wait_recovered(ready: Callable[[], bool], within: float) -> float | None:
    """The epoch time at which `ready()` first held, or None after `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if ready():
            return time.time()
        time.sleep(0.5)
    return None


def _summary(samples: Sequence[float]) -> dict[str, float] | None:
    """Median, p90, p99 and max, without the samples (thousands of them)."""
    if not samples:
        return None
    return {
        "median": round(common.percentile(samples, 50), 3),
        "p90": round(common.percentile(samples, 90), 3),
        "p99": round(common.percentile(samples, 99), 3),
        "max": round(max(samples), 3),
    }
