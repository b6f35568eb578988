"""The recovery benchmarks' rig (bench/recovery.py): the emulator with SSH worker hosts, the
real daemon process with a generated config, the workers' start files, and readers of the
emulator's request log and operations and of the daemon's JSON log.
"""

from __future__ import annotations

import json
import random
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import common, daemon_config, detection

ROOT = Path(__file__).resolve().parents[1]
PROJECT = detection.PROJECT
ZONE = detection.ZONE  # the zone detection.Cloud.preempt acts in
TYPE = "v4-32"
WORKERS = 4
FLEET = "rec"
NODE = f"{FLEET}-0"
OWNER = "bench"
# A recovery's components (bench/recovery.py), and READY -> running split by the daemon's log.
COMPONENTS = ("detection", "delete", "wait_create", "create", "ready_to_run")
DETAIL = ("ready_seen", "probe_and_plan", "launch")

# The run: its attempt and start instant, then it idles until the node dies.
RUN = (
    'echo "$TPUCARED_ATTEMPT $(date +%s.%N)" >> "$RESULTS/starts-$TPUCARED_WORKER"; '
    "exec sleep 100000"
)


@dataclass(frozen=True)
class Settings:
    samples: Mapping[float, int]  # poll interval (s) -> samples
    create_seconds: float
    delete_seconds: float
    # Each sample's create time: create_seconds + uniform(0, this share of the poll interval).
    create_spread: float = 1.0
    seed: int = 20251121


# ---------------------------------------------------------------------------------------------
# The emulator and the daemon


class Cloud(detection.Cloud):
    """detection's emulator thread, with SSH worker hosts."""

    def __init__(self, settings: Settings, hosts_dir: Path) -> None:
        self.ssh_port = common.free_port()
        super().__init__(
            detection.Settings(
                detection_samples={},
                create_seconds=settings.create_seconds,
                delete_seconds=settings.delete_seconds,
            ),
            ssh_hosts=True,
            ssh_port=self.ssh_port,
            hosts_dir=str(hosts_dir),
        )

    def reset(self, create_seconds: float) -> None:
        """A fresh cloud: nothing of a previous daemon (its nodes trust its key) lingers."""

        def fresh(state: Any) -> None:
            state.reset()
            state.timing.update({"create_seconds": create_seconds})

        self.thread.call(fresh)

    def preempt_instance(self, name: str, zone: str) -> float:
        """Preempt a Compute Engine instance now (no notice); the emulator's time of it."""
        return self.thread.call(lambda s: (s.vms.preempt(PROJECT, zone, name, None), s.now())[1])

    def compute_operations(self) -> list[dict[str, Any]]:
        """Every zone operation of Compute Engine, as the emulator holds them."""

        def read(state: Any) -> list[dict[str, Any]]:
            return [
                {
                    "type": op.operation_type,
                    "target": op.target_link,
                    "user": op.user,
                    "insert": op.insert_time,
                    "end": op.end_time,
                }
                for op in state.vms.ops.values()
            ]

        return list(self.thread.call(read))

    def set_create_seconds(self, seconds: float) -> None:
        self.thread.call(lambda s: s.timing.update({"create_seconds": seconds}))

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return json.load(response)

    def operations(self) -> list[dict[str, Any]]:
        """Every operation of the zone, as the API lists them."""
        out: list[dict[str, Any]] = []
        token = ""
        while True:
            query = "?pageSize=1000" + (f"&pageToken={token}" if token else "")
            page = self._get(f"/v2/projects/{PROJECT}/locations/{ZONE}/operations{query}")
            out += page.get("operations", [])
            token = page.get("nextPageToken", "")
            if not token:
                return out


class DaemonProcess:
    def __init__(
        self,
        directory: Path,
        cloud: Cloud,
        *,
        poll: float,
        results: Path,
        root: Path = ROOT,
        run: str = RUN,
        workload: str = "",
        slices: int = 1,
        fleet_keys: Mapping[str, Any] | None = None,
    ) -> None:
        """`run`: the workload's command; `workload`: more [fleet.workload] lines; `slices`:
        the slot's slices (nodes `{FLEET}-0-{slice}` when more than 1); `fleet_keys`: laid
        over the [[fleet]] table (a Compute Engine fleet: bench/recovery_compute.py)."""
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "fleet.toml"
        fleet = daemon_config.fleet(
            FLEET,
            zones=[ZONE],
            accelerator_type=TYPE,
            capacity="spot",
            slices=slices if slices > 1 else None,
            workload={
                "run": run,
                "env": {"RESULTS": str(results)},
                **daemon_config.parse(workload),
            },
        )
        fleet = daemon_config.laid_over(fleet, fleet_keys)
        config = daemon_config.against_emulator(
            cloud.url,
            fleet,
            project=PROJECT,
            owner=OWNER,
            poll=f"{poll:g}s",
            ssh={"port": cloud.ssh_port},
        )
        daemon_config.write(self.config, config)
        self.log_path = directory / "daemon.log"
        self.log = self.log_path.open("ab")
        # `python -m tpucared` imports the package from `root`
        self.process = common.start_daemon(self.config, self.log, cwd=root)

    def stop(self) -> int:
        code = common.stop_process(self.process)
        self.log.close()
        return code

    def events(self, since: float) -> list[dict[str, Any]]:
        """The daemon's JSON log lines at or after `since` (epoch seconds), with `t`."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
                t = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
            except (ValueError, KeyError):
                continue
            if t.timestamp() >= since:
                out.append({**event, "t": t.timestamp()})
        return out


# measure(cloud, daemon, results, attempt, preempted) -> (sample, what woke the delete's tick)
Measure = Callable[["Cloud", "DaemonProcess", Path, int, float], tuple[dict[str, Any], str]]


def components(
    preempted: float,
    deleted_at: float,
    delete_done: float,
    created_at: float,
    ready: float,
    running: float,
) -> dict[str, float]:
    """A sample's COMPONENTS from its instants (one clock), with their total and the
    overhead: the total less the cloud's create."""
    sample = {
        "detection": deleted_at - preempted,
        "delete": delete_done - deleted_at,
        "wait_create": created_at - delete_done,
        "create": ready - created_at,
        "ready_to_run": running - ready,
        "total": running - preempted,
    }
    sample["overhead"] = sample["total"] - sample["create"]
    return sample


def sample_poll(
    cloud: Cloud,
    daemon: DaemonProcess,
    results: Path,
    *,
    poll: float,
    settings: Settings,
    rng: random.Random,
    node: str,
    newest: Callable[[Path], int],
    measure: Measure,
    label: str,
    shown: Sequence[str],
    log: Callable[[str], None],
    preempt: Callable[[str], float] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every sample at one poll interval, for recovery.py and recovery_multi.py alike: let
    the launch's follow-ups settle, preempt `node` at a stratified moment of the poll cycle
    (the daemon ticked around the launch; polls come `poll` apart) with a stated create time,
    measure, log. Returns the samples and what woke each delete's tick. `preempt(node)`:
    how to preempt (default: the TPU API node through `cloud.preempt`)."""
    preempt = preempt or cloud.preempt
    samples = settings.samples[poll]
    strata = list(range(samples))
    rng.shuffle(strata)
    rows: list[dict[str, Any]] = []
    woken: list[str] = []
    for i in range(samples):
        attempt = newest(results)
        time.sleep(1.0 + poll * (strata[i] + rng.random()) / samples)
        stated = settings.create_seconds + rng.uniform(0, settings.create_spread) * poll
        cloud.set_create_seconds(stated)
        preempted = preempt(node)
        row, why = measure(cloud, daemon, results, attempt, preempted)
        row["create_stated"] = stated
        rows.append(row)
        woken.append(why)
        log(
            f"{label} poll={poll:g}s sample {i + 1}/{samples}: total {row['total']:.2f} s, "
            f"overhead {row['overhead']:.2f} s ("
            + ", ".join(f"{k} {row[k]:.2f}" for k in shown if k in row)
            + f"; the delete's tick: {why})"
        )
    return rows, woken


def starts(results: Path, workers: int = WORKERS) -> dict[int, dict[int, float]]:
    """worker -> attempt -> the instant its run started."""
    out: dict[int, dict[int, float]] = {}
    for worker in range(workers):
        path = results / f"starts-{worker}"
        lines = path.read_text().split("\n") if path.exists() else []
        for line in lines:
            parts = line.split()
            if len(parts) == 2:
                out.setdefault(worker, {})[int(parts[0])] = float(parts[1])
    return out


def running_everywhere(results: Path, attempt: int, workers: int = WORKERS) -> float | None:
    """The instant `attempt` had started on the last of the workers, or None."""
    seen = starts(results, workers)
    stamps = [seen.get(w, {}).get(attempt) for w in range(workers)]
    if any(s is None for s in stamps):
        return None
    return max(s for s in stamps if s is not None)


def newest_attempt(results: Path, workers: int = WORKERS) -> int:
    seen = starts(results, workers)
    return min((max(a) for a in seen.values() if a), default=0) if len(seen) == workers else 0


# ---------------------------------------------------------------------------------------------
# The request log, the operations and the daemon's log


def node_of(request: Mapping[str, Any]) -> str | None:
    query = request.get("query") or {}
    if request["method"] == "POST" and request["path"].endswith("/nodes"):
        return str(query.get("nodeId"))
    if request["method"] == "DELETE" and "/nodes/" in request["path"]:
        return str(request["path"].rsplit("/", 1)[1])
    return None


def operation_end(
    operations: Sequence[Mapping[str, Any]], verb: str, after: float, node: str = NODE
) -> float:
    """The end of the first `verb` operation on `node` created at or after `after`."""
    from tpucared_emulator.clock import parse_rfc3339

    found = []
    for op in operations:
        meta = op.get("metadata") or {}
        if meta.get("verb") != verb or not str(meta.get("target", "")).endswith(f"/{node}"):
            continue
        created = parse_rfc3339(meta["createTime"])
        if created >= after - 0.001 and "endTime" in meta:
            found.append((created, parse_rfc3339(meta["endTime"])))
    if not found:
        raise RuntimeError(f"benchmark: no finished {verb} operation of {node} after {after}")
    return min(found)[1]


def woken_by(events: list[dict[str, Any]], preempted: float) -> str:
    """Why the tick that deleted the node ran ("poll", "ssh connection lost", ...)."""
    for e in events:
        if (
            e["t"] >= preempted
            and e.get("event") == "reconcile.tick"
            and "delete" in (e.get("actions") or {})
        ):
            return str(e.get("reason", "?"))
    return "?"


def ready_to_run_detail(
    events: list[dict[str, Any]], ready: float, running: float
) -> dict[str, float]:
    """READY -> the daemon records it -> the plan that launches -> running everywhere."""
    seen = next((e["t"] for e in events if is_ready_transition(e)), None)
    planned = next((e["t"] for e in events if is_launch_tick(e)), None)
    if seen is None or planned is None:
        return {}
    return {
        "ready_seen": seen - ready,
        "probe_and_plan": planned - seen,
        "launch": running - planned,
    }


def is_ready_transition(event: Mapping[str, Any]) -> bool:
    return event.get("event") == "action.transition" and "-> ready" in str(event.get("action", ""))


def is_launch_tick(event: Mapping[str, Any]) -> bool:
    return event.get("event") == "reconcile.tick" and "launch" in (event.get("actions") or {})
