"""A slot through a scheduled host maintenance: lost training time per `on_maintenance` policy,
against doing nothing (issue 41).

`python -m bench.run --only maintenance [--quick]` (or `python -m bench.maintenance [--quick]`).

Method. The emulator runs in this process (its own thread) with simulated SSH worker hosts;
the real `python -m tpucared run` daemon (poll 1 s) keeps five on-demand v4-8 slots, one fleet
per path, side by side so that every sample hits all five paths at once under the same load:

  checkpoint / now / replace / ignore   `fleet.workload.on_maintenance` set to that policy
  nothing   what the tools we replace do: no policy (`ignore`) and a VM that is never warned
            (the emulator serves its `maintenance-event` as NONE to every worker, as Google
            does for a VM that never queried the key, compute/docs/metadata/
            getting-live-migration-notice), so the workload hears of nothing: it is killed
            when the host goes down and resumes from its last periodic checkpoint once the
            node is back (tpucared relaunches it as a babysitter would).

The workload is a toy training loop (bash): a step every 0.1 s, each step appended to a log
outside the worker's disk with its attempt, instant and step number; a checkpoint (0.3 s of
work, then the step written to a file) every CHECKPOINT_EVERY steps and on SIGTERM, after
which it exits 0; each attempt resumes from the checkpoint file.

Once every slot trains, after a random delay of up to one checkpoint interval (so the window
falls anywhere in the periodic checkpoints' cycle, and mid-step), the emulator announces on
every slot's node a SCHEDULED window starting START_IN_S later and lasting DURATION_S
(`:schedule-maintenance`); the in-VM `maintenance-event` notice comes NOTICE_S before it
(`maintenance_event_lead_seconds`). The sample ends at a common horizon: 2 s after the last
path is training again, steadily (an attempt after the one the window met, stepping without
a gap, past the window's start). Per path, from the announcement t0 to that horizon H:

  lost       (H - t0) - steps gained x the step's time: the wall time that did not turn into
             training progress, whatever the cause (the median step interval of the sample)
  idle       of which no step was running (gaps between steps beyond one step's time)
  recomputed lost - idle: steps computed and thrown away (after the last checkpoint)
  back       t0 -> the start of the final, steady run of steps
  after_crash  of `lost`, from an attempt the daemon recorded as failed to its next launch
             (the daemon's log): tpucared's crash backoff, 10 s for a run shorter than
             10 min, which every run at this scale is (a real run killed after hours of
             training is relaunched at once)

Each sample starts a fresh emulator, database and daemon: every window is a slot's first,
with no failure, backoff or handled window left from the sample before.

The time scale is about 1:30 (stated in `parameters`): maintenance_lead 10 s for the
default 5 min, the in-VM notice 2 s for Google's 60 s, a checkpoint every 30 s (15 min), a
window of 6 s (3 min), a create of 4 s (2 min). `lost` for `nothing` grows with the
checkpoint interval (on average half of it); for `checkpoint` with the window's length and
maintenance_lead.

Statistics over a handful of samples (bench/common.py): medians, and ratios to `nothing`.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import common, daemon_config, detection

PROJECT = detection.PROJECT
ZONE = detection.ZONE
PATHS = ("checkpoint", "now", "replace", "ignore", "nothing")
MEASURES = ("lost", "idle", "recomputed", "back")
STEP_S = 0.1
CHECKPOINT_EVERY = 300  # steps: 30 s
CHECKPOINT_S = 0.3
MAINTENANCE_LEAD = "10s"
START_IN_S = 12.0
DURATION_S = 6.0
NOTICE_S = 2.0
CREATE_S = 4.0
POLL_S = 1.0
SCALE = 30  # seconds of a real cloud per second here, roughly

# The toy training loop (bash, as run.sh runs it).
RUN = (
    'R="$RESULTS"; step=$(cat "$R/checkpoint" 2>/dev/null || echo 0); '
    'echo "start $TPUCARED_ATTEMPT $EPOCHREALTIME $step" >> "$R/log"; '
    f"save() {{ sleep {CHECKPOINT_S}; "
    'echo $step > "$R/checkpoint.tmp" && mv "$R/checkpoint.tmp" "$R/checkpoint"; '
    'echo "ckpt $TPUCARED_ATTEMPT $EPOCHREALTIME $step" >> "$R/log"; }; '
    "trap 'save; exit 0' TERM; "
    f"while :; do sleep {STEP_S}; step=$((step + 1)); "
    'echo "step $TPUCARED_ATTEMPT $EPOCHREALTIME $step" >> "$R/log"; '
    f"if [ $((step % {CHECKPOINT_EVERY})) -eq 0 ]; then save; fi; done"
)

Line = tuple[str, int, float, int]  # kind, attempt, instant, step


def read_log(results: Path) -> list[Line]:
    path = results / "log"
    out: list[Line] = []
    for line in (path.read_text() if path.exists() else "").splitlines():
        parts = line.split()
        if len(parts) == 4:
            try:
                out.append((parts[0], int(parts[1]), float(parts[2]), int(parts[3])))
            except ValueError:
                continue  # a line cut by the kill
    return out


def steps(lines: Sequence[Line]) -> list[Line]:
    return [x for x in lines if x[0] == "step"]


def steady_since(
    lines: Sequence[Line], after_attempt: int, past: float, now: float
) -> float | None:
    """When the final run of steps began, if it is steady: by an attempt after `after_attempt`,
    no gap over 1 s, the last step recent, running for 2 s and past `past`; else None."""
    run = steps(lines)
    if not run or run[-1][1] <= after_attempt or now - run[-1][2] > 1.0:
        return None
    begin = len(run) - 1
    while begin > 0 and run[begin - 1][1] == run[-1][1] and run[begin][2] - run[begin - 1][2] < 1.0:
        begin -= 1
    began = run[begin][2]
    return began if run[-1][2] - began >= 2.0 and run[-1][2] > past else None


def measure(lines: Sequence[Line], t0: float, horizon: float, back: float) -> dict[str, float]:
    """The path's figures between the announcement and the horizon (see the Method)."""
    run = steps(lines)
    intervals = [b[2] - a[2] for a, b in itertools.pairwise(run) if a[1] == b[1]]
    step_s = statistics.median(intervals)
    before = [x for x in run if x[2] <= t0]
    within = [x for x in run if t0 < x[2] <= horizon]
    gained = within[-1][3] - before[-1][3]
    lost = (horizon - t0) - gained * step_s
    instants = [t0, *(x[2] for x in within), horizon]
    idle = sum(max(0.0, b - a - step_s) for a, b in itertools.pairwise(instants))
    return {
        "lost": lost,
        "idle": idle,
        "recomputed": lost - idle,
        "back": back - t0,
        "lost_steps": lost / step_s,
        "step_s": step_s,
    }


class Cloud(detection.Cloud):
    """The emulator with SSH worker hosts and the scaled-down maintenance timings."""

    def __init__(self, hosts_dir: Path) -> None:
        self.ssh_port = common.free_port()
        super().__init__(
            detection.Settings(detection_samples={}, create_seconds=CREATE_S, delete_seconds=1.0),
            ssh_hosts=True,
            ssh_port=self.ssh_port,
            hosts_dir=str(hosts_dir),
            maintenance_event_lead_seconds=NOTICE_S,
        )

    def announce(self, fleets: Sequence[str]) -> float:
        """A window on each fleet's READY node, START_IN_S from now; the instant of it."""

        def act(state: Any) -> float:
            for fleet in fleets:
                node = next(
                    n for n in state.all_nodes()
                    if n.node_id.startswith(f"{fleet}-") and n.state == "READY"
                )  # fmt: skip
                body = {
                    "start_in_seconds": START_IN_S, "duration_seconds": DURATION_S,
                    "type": "SCHEDULED",
                }  # fmt: skip
                state.maintenance.announce_window(node, body)
                if fleet == "nothing":
                    # The in-VM notice to no worker: an unwarned VM (see the Method).
                    node.host_maintenance.workers = frozenset()
            return float(state.now())

        return float(self.thread.call(act))


def config(cloud: Cloud, results: Path, paths: Sequence[str]) -> dict[str, Any]:
    fleets = []
    for path in paths:
        policy = "ignore" if path == "nothing" else path
        workload = {
            "run": RUN,
            "env": {"RESULTS": str(results / path)},
            "on_maintenance": policy,
            "maintenance_lead": MAINTENANCE_LEAD,
            "stop_grace": "2s",
        }
        fleets.append(
            daemon_config.fleet(
                path,
                zones=[ZONE],
                accelerator_type="v4-8",
                capacity="on-demand",
                workload=workload,
            )
        )
    return daemon_config.against_emulator(
        cloud.url, *fleets, project=PROJECT, owner="bench", poll=f"{POLL_S:g}s",
        ssh={"port": cloud.ssh_port},
    )  # fmt: skip


def sample(
    cloud: Cloud, results: Path, paths: Sequence[str], rng: random.Random, spread: float
) -> tuple[float, dict[str, dict[str, float]]]:
    time.sleep(rng.random() * spread)
    met = {p: max((x[1] for x in steps(read_log(results / p))), default=0) for p in paths}
    t0 = cloud.announce(paths)
    window = t0 + START_IN_S
    back: dict[str, float] = {}

    def all_back() -> bool:
        now = time.time()
        for p in paths:
            if p not in back:
                began = steady_since(read_log(results / p), met[p], window, now)
                if began is not None:
                    back[p] = began
        return len(back) == len(paths)

    common.wait_until(all_back, START_IN_S + DURATION_S + 120, "every path training again")
    horizon = max(back.values()) + 2.0
    common.wait_until(lambda: time.time() > horizon + 0.5, 10, "the horizon")
    return t0, {p: measure(read_log(results / p), t0, horizon, back[p]) for p in paths}


def after_crash(log_path: Path, fleet: str, since: float) -> float:
    """Seconds from each attempt of `fleet` recorded as failed (after `since`) to the next
    launch, summed: mostly tpucared's crash backoff (see the docs' reading)."""
    failed: float | None = None
    total = 0.0
    for line in log_path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
            t = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError):
            continue
        if event.get("fleet") != fleet or t < since:
            continue
        if event["event"] == "workload.finished" and event.get("outcome") == "failed":
            failed = t
        elif event["event"] == "workload.launched" and failed is not None:
            total += t - failed
            failed = None
    return total


def one_sample(
    where: Path, paths: Sequence[str], rng: random.Random, spread: float
) -> dict[str, dict[str, float]]:
    """A fresh emulator, database and daemon: every sample is a slot's first window (nothing
    left of the previous sample's attempts, failures or handled windows)."""
    results = where / "results"
    for p in paths:
        (results / p).mkdir(parents=True)
    with Cloud(where / "hosts") as cloud:
        (where / "daemon").mkdir(parents=True, exist_ok=True)
        path = daemon_config.write(where / "daemon" / "fleet.toml", config(cloud, results, paths))
        log_path = where / "daemon" / "daemon.log"
        with log_path.open("ab") as log:
            daemon = common.start_daemon(path, log, cwd=Path(__file__).resolve().parents[1])
            try:
                common.wait_until(
                    lambda: all(
                        steady_since(read_log(results / p), 0, 0, time.time()) for p in paths
                    ),
                    180,
                    "every path training",
                )
                t0, figures = sample(cloud, results, paths, rng, spread)
            finally:
                common.stop_process(daemon)
    for p, row in figures.items():
        row["after_crash"] = after_crash(log_path, p, t0)
    return figures


def run(
    quick: bool,
    *,
    progress: Callable[[str], None] = print,
    scratch: Path | None = None,
    samples: int | None = None,
    paths: Sequence[str] = PATHS,
    spread: float = CHECKPOINT_EVERY * STEP_S,
) -> dict[str, Any]:
    """`samples` (default 2 quick, 6 in full); `paths`: which of PATHS to run; `spread`: the
    announcement's random delay, at most this many seconds (0: the window meets attempt 1
    before its first periodic checkpoint)."""
    n = samples or (2 if quick else 6)
    rng = random.Random(20261129)
    rows: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
    with tempfile.TemporaryDirectory(prefix="tpucared-bench-maintenance-") as tmp:
        where = scratch or Path(tmp)
        for i in range(n):
            figures = one_sample(where / f"sample-{i + 1}", paths, rng, spread)
            for p, row in figures.items():
                rows[p].append(row)
            progress(
                f"maintenance sample {i + 1}/{n}: "
                + ", ".join(f"{p} lost {r['lost']:.1f}s" for p, r in figures.items())
            )
    summary = {
        p: {
            k: common.summarize([r[k] for r in rs])
            for k in (*MEASURES, "lost_steps", "after_crash")
        }
        for p, rs in rows.items()
    }
    reference = summary.get("nothing", {}).get("lost", {}).get("median")
    return {
        "method": __doc__.split("Method.", 1)[1].split("Statistics")[0].strip() if __doc__ else "",
        "parameters": {
            "scale": f"about 1:{SCALE} (seconds here : seconds on a cloud)",
            "step_s": STEP_S,
            "checkpoint_every_steps": CHECKPOINT_EVERY,
            "announcement_delay_up_to_s": spread,
            "checkpoint_s": CHECKPOINT_S,
            "maintenance_lead": MAINTENANCE_LEAD,
            "window_announced_s_ahead": START_IN_S,
            "maintenance_duration_s": DURATION_S,
            "in_vm_notice_s": NOTICE_S,
            "emulator_create_seconds": CREATE_S,
            "poll_interval_s": POLL_S,
            "accelerator_type": "v4-8 on-demand",
            "samples": n,
        },
        "summary_s": summary,
        "lost_ratio_to_nothing": {
            p: common.ratio(s["lost"]["median"], reference) for p, s in summary.items()
        },
        "raw": rows,
    }


def render(result: Mapping[str, Any]) -> str:
    rows = []
    for path, measures in result["summary_s"].items():
        rows.append(
            [
                path,
                str(measures["lost"]["n"]),
                *(common.format_seconds(measures[k]["median"]) for k in MEASURES),
                common.format_seconds(measures["after_crash"]["median"]),
                f"{measures['lost_steps']['median']:.0f}",
                common.format_ratio(result["lost_ratio_to_nothing"].get(path)),
            ]
        )
    params = result["parameters"]
    title = (
        f"host maintenance, scale {params['scale']}: window announced "
        f"{params['window_announced_s_ahead']:g}s ahead, {params['maintenance_duration_s']:g}s "
        f"long, maintenance_lead {params['maintenance_lead']}, a checkpoint every "
        f"{params['checkpoint_every_steps'] * params['step_s']:g}s; medians, seconds from the "
        "announcement"
    )
    headers = [
        "path", "n", "lost", "idle", "recomputed", "back", "after crash", "lost steps",
        "lost / nothing",
    ]  # fmt: skip
    return title + "\n" + common.table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.maintenance",
        description=__doc__.split("\n")[0] if __doc__ else None,
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output-dir", type=Path, default=common.RESULTS_DIR)
    parser.add_argument("--keep", type=Path, help="keep the daemon's config, log and results here")
    args = parser.parse_args(argv)
    from bench import run as harness

    def measured(quick: bool) -> dict[str, Any]:
        return run(quick, scratch=args.keep)

    path, envelope = harness.run_one(
        "maintenance", measured, quick=args.quick, output_dir=args.output_dir
    )
    print(render(envelope["result"]))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
