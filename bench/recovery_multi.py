"""Recovery of a 2-slice multislice slot (issue 13): one slice preempted -> the job running
again on every worker of both slices. Part of `python -m bench.run --only recovery`, measured
at each poll interval right after the single-slice slot (bench/recovery.py), in the same run.

Method. As bench/recovery.py (the same emulator with SSH worker hosts, stated cloud timing,
stratified preemption moments and poll intervals), with one direct spot slot of `slices = 2`
v4-32 slices (nodes rec-0-0 and rec-0-1, 4 workers each: 8 workers, as many simulated SSH
hosts as this 2-core machine runs without the hosts dominating). The run appends its
TPUCARED_ATTEMPT and start instant to a file per (TPUCARED_SLICE, worker), and traps SIGTERM
to append its attempt and stop instant to another. Once attempt k runs on all 8 workers,
slice 1 (rec-0-1) is preempted through the emulator; the sample ends when attempt k+1 has
started on all 8. Slice 0 is kept (direct provisioning): its attempt k is stopped by the
daemon, then relaunched beside the replaced slice 1. Components, of slice 1's delete and
create (as recovery.py's):

  detection      preempt -> the daemon's DELETE of rec-0-1 arrives
  delete         DELETE -> its operation ends (the cloud's)
  wait_create    the delete operation ends -> the create of rec-0-1 arrives
  create         create arrives -> its operation ends, rec-0-1 READY (the cloud's)
  ready_to_run   READY -> attempt k+1 started on the last of the 8 workers
  total          preempt -> running on all 8 workers
  overhead       total - create

and, from the daemon's log and the workers' files (same clock): ready_seen, probe_and_plan and
launch as in recovery.py (launch: the plan that launches -> running on all 8), split further:
launch_cleanup (-> the daemon logs the launch's cleanup of attempt k done on both slices,
`workload.cleanup`; it starts no run before), launch_kept and launch_new (-> running on the
last worker of the kept slice 0 / of the new slice 1). survivors_stop: preempt -> attempt k's
run stopped (its SIGTERM trap) on the last worker of slice 0; whether that stop came before
the replacement was READY is counted (`survivors_stopped_before_ready`), and so are the
ticks of the delete that dropped a workload action (`delete_ticks_that_dropped_a_stop`: the
daemon's `dropped`, its launches and stops on a node the plan takes away).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import common
from bench import recovery_rig as rig

SLICES = 2
WORKERS = rig.WORKERS  # per slice
PREEMPTED = f"{rig.FLEET}-0-1"
KEPT = f"{rig.FLEET}-0-0"
PER_SLICE = ("launch_kept", "launch_new")
EXTRA = ("survivors_stop", "launch_cleanup", *PER_SLICE)

# The run: its attempt and start instant; on SIGTERM (the daemon's stop) its stop instant.
RUN = (
    'f="$TPUCARED_SLICE-$TPUCARED_WORKER"; '
    'echo "$TPUCARED_ATTEMPT $(date +%s.%N)" >> "$RESULTS/starts-$f"; '
    'trap \'echo "$TPUCARED_ATTEMPT $(date +%s.%N)" >> "$RESULTS/stops-$f"; exit 143\' TERM; '
    "sleep 100000 & wait"
)

Stamps = dict[tuple[int, int], dict[int, float]]  # (slice, worker) -> attempt -> instant


def stamps(results: Path, kind: str = "starts") -> Stamps:
    """(slice, worker) -> attempt -> the instant its run started (`kind` "stops": stopped)."""
    out: Stamps = {}
    for s in range(SLICES):
        for w in range(WORKERS):
            path = results / f"{kind}-{s}-{w}"
            for line in path.read_text().split("\n") if path.exists() else []:
                parts = line.split()
                if len(parts) == 2:
                    out.setdefault((s, w), {})[int(parts[0])] = float(parts[1])
    return out


def last_of(seen: Stamps, attempt: int, slices: range = range(SLICES)) -> float | None:
    """The instant `attempt` had its stamp on the last worker of `slices`, or None."""
    found = [seen.get((s, w), {}).get(attempt) for s in slices for w in range(WORKERS)]
    if any(t is None for t in found):
        return None
    return max(t for t in found if t is not None)


def newest_attempt(results: Path) -> int:
    """The newest attempt started on every worker of every slice (0: none yet)."""
    seen = stamps(results)
    if len(seen) < SLICES * WORKERS:
        return 0
    return min(max(a) for a in seen.values())


def measure(
    cloud: rig.Cloud, daemon: rig.DaemonProcess, results: Path, attempt: int, preempted: float
) -> tuple[dict[str, Any], str]:
    """The instants and components of one recovery of the slot (attempt -> attempt + 1)."""
    running = common.wait_until(
        lambda: last_of(stamps(results), attempt + 1),
        180,
        f"attempt {attempt + 1} on every worker of both slices",
    )
    requests = cloud.requests(preempted - 0.001)
    acted = [
        (r["method"], rig.node_of(r), r["time"])
        for r in requests
        if r["method"] in ("DELETE", "POST") and r.get("status") == 200 and rig.node_of(r)
    ]
    operations = cloud.operations()
    deleted_at = min(t for m, n, t in acted if m == "DELETE" and n == PREEMPTED)
    delete_done = rig.operation_end(operations, "delete", deleted_at, PREEMPTED)
    created_at = min(t for m, n, t in acted if m == "POST" and n == PREEMPTED and t >= delete_done)
    ready = rig.operation_end(operations, "create", created_at, PREEMPTED)
    started, stopped = stamps(results), stamps(results, "stops")
    survivors = last_of(stopped, attempt, range(1))
    sample: dict[str, Any] = rig.components(
        preempted, deleted_at, delete_done, created_at, ready, running
    )
    events = daemon.events(preempted - 1.0)
    detail = rig.ready_to_run_detail([e for e in events if e["t"] >= ready], ready, running)
    sample.update(detail)
    if detail:
        planned = running - detail["launch"]
        for name, s in zip(PER_SLICE, range(SLICES), strict=True):
            sample[name] = (last_of(started, attempt + 1, range(s, s + 1)) or running) - planned
        cleaned = [
            e["t"]
            for e in events
            if e.get("event") == "workload.cleanup" and e.get("attempt") == attempt
            and e["t"] >= planned
        ]  # fmt: skip
        if cleaned:
            sample["launch_cleanup"] = max(cleaned) - planned
    if survivors is not None:
        sample["survivors_stop"] = survivors - preempted
        sample["survivors_stopped_before_ready"] = survivors < ready
    # What the sample rests on: the cloud calls it saw, every worker's start of attempt
    # k + 1 and slice 0's stops of attempt k (seconds after the preemption).
    # The tick that deleted rec-0-1 plans the stop on slice 0 too; it says if it dropped it.
    sample["delete_tick_dropped"] = next(
        (
            int(e.get("dropped", 0))
            for e in events
            if e["t"] >= preempted and e.get("event") == "reconcile.tick"
            and "delete" in (e.get("actions") or {})
        ),
        -1,
    )  # fmt: skip
    sample["attempt"] = attempt
    sample["cloud_calls"] = [f"{m} {n}" for m, n, t in acted if t <= running]
    sample["starts_s"] = {
        str(s): [round(started[(s, w)][attempt + 1] - preempted, 4) for w in range(WORKERS)]
        for s in range(SLICES)
    }
    sample["kept_stops_s"] = [
        round(t - preempted, 4)
        for w in range(WORKERS)
        if (t := stopped.get((0, w), {}).get(attempt)) is not None
    ]
    return sample, rig.woken_by(events, preempted)


def measure_poll(
    cloud: rig.Cloud,
    scratch: Path,
    poll: float,
    settings: rig.Settings,
    rng: random.Random,
    log: Callable[[str], None],
    root: Path = rig.ROOT,
) -> dict[str, Any]:
    """Every sample of the 2-slice slot at one poll interval (its own daemon)."""
    cloud.reset(settings.create_seconds)
    results = scratch / f"multislice-results-{poll:g}"
    results.mkdir(parents=True)
    daemon = rig.DaemonProcess(
        scratch / f"multislice-daemon-{poll:g}",
        cloud,
        poll=poll,
        results=results,
        root=root,
        run=RUN,
        slices=SLICES,
    )
    try:
        common.wait_until(lambda: newest_attempt(results) >= 1, 120, "attempt 1 on all 8")
        rows, woken = rig.sample_poll(
            cloud, daemon, results, poll=poll, settings=settings, rng=rng, node=PREEMPTED,
            newest=newest_attempt, measure=measure, label="recovery 2 slices",
            shown=(*rig.COMPONENTS, *EXTRA), log=log,
        )  # fmt: skip
    finally:
        daemon.stop()
    names = [*rig.COMPONENTS, "total", "overhead", *rig.DETAIL, *EXTRA]
    summary = {k: common.summarize([r[k] for r in rows if k in r]) for k in names}
    return {
        "poll_interval_s": poll,
        "samples": len(rows),
        "components_s": summary,
        "survivors_stopped_before_ready": sum(
            1 for r in rows if r.get("survivors_stopped_before_ready")
        ),
        "delete_tick_reasons": dict(Counter(woken)),
        "delete_ticks_that_dropped_a_stop": sum(1 for r in rows if r["delete_tick_dropped"] > 0),
        "raw": rows,
    }


def parameters() -> dict[str, Any]:
    return {
        "accelerator_type_per_slice": rig.TYPE,
        "slices": SLICES,
        "workers_per_slice": WORKERS,
        "workers": SLICES * WORKERS,
        "provisioning": "direct",
        "preempted_node": PREEMPTED,
        "kept_node": KEPT,
    }


RATIOS = ("total", "overhead", "detection", "wait_create", "ready_to_run")


def versus_single(single: Mapping[str, Any], multi: Mapping[str, Any]) -> dict[str, Any]:
    """Multislice / single-slice, per component: the ratio of the medians (same run)."""
    out: dict[str, Any] = {"poll_interval_s": multi["poll_interval_s"]}
    for name in RATIOS:
        a, b = multi["components_s"][name], single["components_s"][name]
        out[name] = {
            "single_median": b.get("median"),
            "multislice_median": a.get("median"),
            "ratio": common.ratio(a.get("median"), b.get("median")),
        }
    return out
