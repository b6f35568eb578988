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
  creates a minute the daemon sustained meanwhile (until the recovery limit when the fleet
  is not whole by then, with the slots still missing and the time they would take at that
  rate), and the creates the emulator refused for its per-minute quota.

The emulator refuses nodes.create beyond `--create-quota` a minute per project (default 91,
the only figure reported for the TPU API: docs/daemon.md, "Request quotas"), and once the
storm starts makes a node in `--create-seconds` (default 60: a real TPU takes one to a few
minutes; the seeded fleet is made at once). `--policy KEY=VALUE` lays TOML values over the
daemon's [policy] (e.g. `creates_per_minute=91`, or the limits of before issue 31:
`creates_per_minute=100000 max_creates=8 max_creates_per_fleet=4`).
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import common
from bench.scale_fleet import PROJECT, fleet_layout

REST_S = 60.0  # a node preempted is not picked again for this long
STORM_SEED = 31
REPORTED_CREATE_QUOTA = 91  # nodes.create a minute per project (docs/daemon.md)


@dataclass(frozen=True)
class StormSettings:
    recovery_limit: float = 600.0  # seconds to wait after the storm for every slot READY
    create_quota: int | None = REPORTED_CREATE_QUOTA  # the emulator's, per project and minute
    create_seconds: float = 60.0  # the emulator's create time from the storm's start
    policy: Mapping[str, Any] = field(default_factory=dict)  # over the daemon's [policy]


def add_storm_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--recovery-limit",
        type=float,
        default=StormSettings.recovery_limit,
        help="storm: seconds to wait for every slot READY again after the storm",
    )
    parser.add_argument(
        "--create-quota",
        type=int,
        default=REPORTED_CREATE_QUOTA,
        help="storm: the emulator's nodes.create quota a minute per project (0: none)",
    )
    parser.add_argument(
        "--create-seconds",
        type=float,
        default=StormSettings.create_seconds,
        help="storm: the emulator's create time once the storm starts",
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a TOML value laid over the daemon's [policy] (repeatable)",
    )


def storm_settings(args: argparse.Namespace) -> StormSettings:
    policy = {}
    for item in args.policy:
        key, _, value = item.partition("=")
        policy.update(tomllib.loads(f"{key.strip()} = {value.strip()}"))
    return StormSettings(
        recovery_limit=args.recovery_limit,
        create_quota=args.create_quota or None,
        create_seconds=args.create_seconds,
        policy=policy,
    )


def set_create_seconds(url: str, seconds: float) -> None:
    """The emulator's create time from now on (its control API)."""
    body = json.dumps({"create_seconds": seconds}).encode()
    request = urllib.request.Request(url + "/_emulator/v1/timing", data=body, method="PUT")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        json.load(response)


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
    recovery: Recovery,
) -> dict[str, Any]:
    delays, missing = delete_delays(storm.preempted, requests)
    waited = (recovery.recovered_at or recovery.gave_up_at) - storm.ended_at
    creates = [
        r
        for r in requests
        if r["method"] == "POST"
        and str(r["path"]).endswith("/nodes")
        and storm.ended_at <= float(r["time"]) <= storm.ended_at + waited
    ]
    made = [r for r in creates if r["status"] == 200]
    rate = len(made) / (waited / 60) if waited > 0 else None
    return {
        "preempted": len(storm.preempted),
        "refused": storm.refused,
        "per_round": storm._per_round,
        "storm_s": round(storm.ended_at - storm.started_at, 1),
        "delete_delay_s": _summary(delays),
        "delete_missing": missing,
        "recovery_s": None if recovery.recovered_at is None else round(waited, 1),
        "missing_at_storm_end": recovery.missing_at_storm_end,
        "missing_at_end": recovery.missing_at_end,
        "creates_per_minute_recovering": None if rate is None else round(rate, 1),
        "creates_refused_for_quota": sum(1 for r in creates if r["status"] == 429),
        # What the whole recovery would take at the rate measured (the target's yardstick).
        "projected_recovery_s": (
            round(recovery.missing_at_storm_end / rate * 60, 1) if rate else None
        ),
    }


@dataclass(frozen=True)
class Recovery:
    missing_at_storm_end: int  # slots not READY when the storm stopped
    missing_at_end: int  # ... when every slot was READY again (0) or the limit passed
    recovered_at: float | None  # epoch seconds, or None
    gave_up_at: float


def wait_recovered(missing: Callable[[], int], within: float) -> Recovery:
    """Wait until `missing()` (the slots not READY) is 0, at most `within` seconds."""
    at_storm_end = missing()
    deadline = time.monotonic() + within
    left = at_storm_end
    while time.monotonic() < deadline:
        left = missing()
        if left == 0:
            return Recovery(at_storm_end, 0, time.time(), time.time())
        time.sleep(0.5)
    return Recovery(at_storm_end, left, None, time.time())


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
