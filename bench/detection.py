"""How fast the real daemon notices a dead node (issue "Benchmarks", item 1).

`python -m bench.run --only detection [--quick]` (or `python -m bench.detection [--quick]`).
Capacity latency (item 2) is its own benchmark, bench/capacity/, which reuses the emulator
and daemon helpers defined here (`Cloud`, `DaemonProcess`, `recorded_ready`).

Method. The emulator runs in this process (its own thread, default timing: a create takes
2 s, a delete 1 s); the daemon is the real `python -m tpucared run` process with a generated
config (credentials "none", default policy). Every instant comes from the emulator's clock:
the moment a control call took effect, and the arrival time of each API request in the
emulator's request log.

- detection latency: a READY spot node is preempted at a chosen moment of the daemon's poll
  cycle, and the sample is the time until the daemon's DELETE for that node arrives. The
  moments are stratified (sample i of n falls in the i-th n-th of the cycle, in random
  order, at a uniform point inside it), so a handful of samples covers the whole cycle
  instead of clustering by chance. Measured per poll interval (10 s is the default). The
  slot is recreated (and that READY seen by the daemon) before the next sample.

Statistics are over a handful of samples (bench/common.py): quote the median.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from bench import common, daemon_config

if TYPE_CHECKING:
    from tpucared_emulator.state import EmulatorState

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "bench-project"
ZONE = "us-central2-b"
TYPE = "v4-8"
OWNER = "bench"


@dataclass(frozen=True)
class Settings:
    detection_samples: Mapping[float, int]  # poll interval (s) -> samples
    create_seconds: float = 2.0
    delete_seconds: float = 1.0
    seed: int = 20251121
    extra: Mapping[str, Any] = field(default_factory=dict)


FULL = Settings(detection_samples={10.0: 10, 2.0: 15})
QUICK = Settings(detection_samples={10.0: 2, 2.0: 4})


# ---------------------------------------------------------------------------------------------
# The emulator and the daemon


class Cloud:
    """The emulator in a background thread; reads and control through its own loop."""

    def __init__(self, settings: Settings | None = None, **options: Any) -> None:
        from tpucared_emulator import EmulatorOptions, EmulatorThread

        settings = settings or Settings(detection_samples={})
        self.thread = EmulatorThread(
            EmulatorOptions(
                create_seconds=settings.create_seconds,
                delete_seconds=settings.delete_seconds,
                **options,
            )
        )

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.stop()

    @property
    def url(self) -> str:
        return self.thread.url

    def nodes(self, zone: str | None = None) -> dict[str, str]:
        """node id -> state, of every node (of `zone`, if given)."""
        return dict(
            self.thread.call(
                lambda s: [
                    (n.node_id, n.state) for n in s.all_nodes() if zone is None or n.zone == zone
                ]
            )
        )

    def preempt(self, node: str, zone: str = ZONE) -> float:
        """Preempt now; returns the emulator's time of it."""
        return self.thread.call(lambda s: (s.preempt(PROJECT, zone, node), s.now())[1])

    def set_capacity(self, available: int | None, zone: str = ZONE) -> float:
        """Set the zone's capacity now; returns the emulator's time of it."""

        def act(state: EmulatorState) -> float:
            state.set_capacity(zone, TYPE, available)
            return state.now()

        return self.thread.call(act)

    def requests(self, since: float) -> list[dict[str, Any]]:
        url = f"{self.url}/_emulator/v1/requests?since={since}"
        with urllib.request.urlopen(url, timeout=30) as response:
            data: list[dict[str, Any]] = json.load(response)
            return data


class DaemonProcess:
    """`python -m tpucared run` with a generated config: one fleet "bench" of `size` slots in
    `zone`; `policy` is the body of a [policy] section (empty: the defaults)."""

    def __init__(
        self,
        directory: Path,
        endpoint: str,
        *,
        poll: float,
        size: int,
        zone: str = ZONE,
        owner: str = OWNER,
        policy: str = "",
    ) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "fleet.toml"
        config = daemon_config.against_emulator(
            endpoint,
            daemon_config.fleet(
                "bench", zones=[zone], accelerator_type=TYPE, size=size, capacity="spot"
            ),
            project=PROJECT,
            owner=owner,
            poll=f"{poll:g}s",
            policy=policy or None,
        )
        daemon_config.write(self.config, config)
        self.log = (directory / "daemon.log").open("ab")
        self.process = common.start_daemon(self.config, self.log, cwd=ROOT)

    def stop(self) -> int:
        code = common.stop_process(self.process)
        self.log.close()
        return code


def all_ready(cloud: Cloud, size: int) -> bool:
    states = cloud.nodes()
    return len(states) == size and all(s == "READY" for s in states.values())


def recorded_ready(daemon: DaemonProcess, size: int) -> bool:
    """The daemon's own database says every slot is READY: it is up and has seen them."""
    db = daemon.directory / "state.db"
    if not db.exists():
        return False
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT count(*) FROM nodes WHERE phase = 'ready'").fetchone()
    except sqlite3.OperationalError:
        return False  # still migrating
    finally:
        conn.close()
    return int(rows[0]) == size


def fleet_ready(cloud: Cloud, daemon: DaemonProcess, size: int) -> bool:
    return all_ready(cloud, size) and recorded_ready(daemon, size)


def _node_of(request: Mapping[str, Any]) -> str | None:
    """The node a create (?nodeId=) or delete (.../nodes/<id>) request is about."""
    query = request.get("query") or {}
    if request["method"] == "POST" and request["path"].endswith("/nodes"):
        return str(query.get("nodeId"))
    if request["method"] == "DELETE" and "/nodes/" in request["path"]:
        return str(request["path"].rsplit("/", 1)[1])
    return None


def request_kind(request: Mapping[str, Any]) -> str:
    """The API method a request-log entry is: nodes.list, nodes.create, operations.get, ..."""
    method, path = request["method"], request["path"]
    if "/operations/" in path:
        return "operations.get"
    if path.endswith("/nodes"):
        return "nodes.list" if method == "GET" else "nodes.create"
    if "/nodes/" in path:
        return "nodes.delete" if method == "DELETE" else f"nodes.{method.lower()}"
    return f"{method} other"


# ---------------------------------------------------------------------------------------------
# Measurements


def measure_detection(
    cloud: Cloud,
    scratch: Path,
    poll: float,
    samples: int,
    rng: random.Random,
    log: Callable[[str], None],
) -> dict[str, Any]:
    size = 2
    daemon = DaemonProcess(scratch / f"detection-{poll:g}", cloud.url, poll=poll, size=size)
    latencies: list[float] = []
    try:
        common.wait_until(lambda: fleet_ready(cloud, daemon, size), 60 + 3 * poll, "the fleet")
        strata = list(range(samples))
        rng.shuffle(strata)
        for i in range(samples):
            # The daemon ticked when it saw the fleet READY: its next poll is `poll` later.
            time.sleep(poll * (strata[i] + rng.random()) / samples)
            node = f"bench-{i % size}"
            at = cloud.preempt(node)

            def deleted(node: str = node, at: float = at) -> float | None:
                for r in cloud.requests(at):
                    if _node_of(r) == node and r["method"] == "DELETE":
                        return float(r["time"])
                return None

            seen = common.wait_until(deleted, 3 * poll + 30, f"the DELETE of {node}")
            latencies.append(seen - at)
            log(f"detection poll={poll:g}s sample {i + 1}/{samples}: {seen - at:.3f} s")
            common.wait_until(
                lambda: fleet_ready(cloud, daemon, size), 60 + 3 * poll, "the replacement"
            )
    finally:
        daemon.stop()
    return {
        "poll_interval_s": poll,
        "fleet_size": size,
        "latency_s": common.summarize(latencies),
    }


def run(
    quick: bool, *, settings: Settings | None = None, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    settings = settings or (QUICK if quick else FULL)
    rng = random.Random(settings.seed)
    result: dict[str, Any] = {
        "method": __doc__.split("Method.", 1)[1].split("Statistics")[0].strip() if __doc__ else "",
        "parameters": {
            "emulator_create_seconds": settings.create_seconds,
            "emulator_delete_seconds": settings.delete_seconds,
            "detection_samples": {f"{k:g}s": v for k, v in settings.detection_samples.items()},
            "seed": settings.seed,
        },
        "detection": [],
    }
    with tempfile.TemporaryDirectory(prefix="tpucared-bench-") as tmp, Cloud(settings) as cloud:
        scratch = Path(tmp)
        for poll, samples in settings.detection_samples.items():
            result["detection"].append(
                measure_detection(cloud, scratch, poll, samples, rng, progress)
            )
    return result


def render(result: Mapping[str, Any]) -> str:
    rows = []
    for d in result["detection"]:
        s = d["latency_s"]
        rows.append(
            [
                "preempt -> DELETE issued",
                f"poll {d['poll_interval_s']:g}s, {d['fleet_size']} slots",
                *common.summary_cells(s, ("median", "p99", "max")),
            ]
        )
    headers = ["latency", "settings", "n", "median s", "p99 s", "max s"]
    return common.table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.detection", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    from bench import run as harness

    path, envelope = harness.run_one(
        "detection", run, quick=args.quick, output_dir=common.RESULTS_DIR
    )
    print(render(envelope["result"]))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
