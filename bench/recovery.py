"""Recovery time: a preemption -> the workload running again on every worker of the slice.

`python -m bench.run --only recovery [--quick]` (or `python -m bench.recovery [--quick]
[--variant single|multislice]`).

Method. The emulator runs in this process (its own thread) with simulated SSH worker hosts
and stated timing: a delete takes `delete_seconds` (1 s), a create `create_seconds` (10 s)
plus a uniform fraction of one poll interval (drawn per sample, set through the emulator
before the preemption). The spread matters: the daemon's polls come one interval apart
from the tick that issued the create, so with a create time that is a multiple of the poll
interval a poll's list lands on the very instant the node turns READY and hides how long
noticing a READY node takes otherwise; spread over one interval, READY falls at a uniform
point of the poll cycle, as it does on a real cloud.

The daemon is the real `python -m tpucared run` process with a generated config: one v4-32
spot slot (4 workers), default policy, a workload whose run appends its TPUCARED_ATTEMPT and
its own start instant (`date +%s.%N`) to a file per worker outside the workers' homes (a
preempted VM loses its disk). Once attempt k runs on all four workers, the node is preempted
through the emulator at a stratified moment of the daemon's poll cycle (sample i of n falls
in the i-th n-th of the cycle, in random order), and the sample ends when attempt k+1 has
started on all four. Every instant comes from the one clock of this machine: the emulator's
(the preemption, each request's arrival in its request log, each operation's createTime and
endTime as the API reports them) and the workers' start stamps. Components:

  detection      preempt -> the daemon's DELETE arrives
  delete         DELETE -> its operation ends (the cloud's: `delete_seconds`)
  wait_create    the delete operation ends -> the daemon's create arrives
  create         create arrives -> its operation ends, the node READY (the cloud's)
  ready_to_run   READY -> the run started on the last of the 4 workers (SSH, setup, launch)
  total          preempt -> running on all 4 workers
  overhead       total - create: everything but the cloud's create time (the target: 10 s)

`ready_to_run` is split further with the daemon's own log (its timestamps, same clock):
READY -> the daemon records it (the create operation's end or a poll's list), -> the plan
that launches (after the first probe of the new node), -> the run started on the last
worker.

Statistics are over a handful of samples (bench/common.py): quote the median.

The same run measures a 2-slice multislice slot too (bench/recovery_multi.py, issue 13): at
each poll interval right after the single slice, with the ratio of their medians
(`--variant single|multislice|compute|compute_slice` runs one), and then Compute Engine fleets
(bench/recovery_compute.py): one spot tpu7x-standard-4t VM (issue 27) and one 4-VM spot TPU7x
slice, a managed instance group (issue 28), each with compute / TPU ratios.
The rig (emulator, daemon, the workers' files, log readers) is bench/recovery_rig.py.
"""

from __future__ import annotations

import random
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench import recovery_compute as compute
from bench import recovery_multi as multi
from bench import recovery_rig as rig
from bench.recovery_rig import Cloud, DaemonProcess, Settings, newest_attempt, running_everywhere

# The rig's names, as bench/notice.py and others read them here.
ROOT = rig.ROOT
PROJECT = rig.PROJECT
ZONE = rig.ZONE
TYPE = rig.TYPE
WORKERS = rig.WORKERS
FLEET = rig.FLEET
NODE = rig.NODE
RUN = rig.RUN
_node_of = rig.node_of

COMPONENTS = rig.COMPONENTS
DETAIL = rig.DETAIL

TARGET_OVERHEAD_S = 10.0
# Every variant at each poll interval (single slice, 2 slices, a Compute Engine VM): 8
# samples each keeps the full run near 18 minutes (1,068 s on 2026-11-26).
VARIANTS = ("single", "multislice", "compute", "compute_slice")
FULL = Settings(samples={10.0: 8, 2.0: 8}, create_seconds=10.0, delete_seconds=1.0)
QUICK = Settings(samples={2.0: 2}, create_seconds=4.0, delete_seconds=1.0)


# ---------------------------------------------------------------------------------------------
# One sample


def measure(
    cloud: Cloud, daemon: DaemonProcess, results: Path, attempt: int, preempted: float
) -> tuple[dict[str, float], str]:
    """The instants and components of one recovery (attempt -> attempt + 1)."""
    running = common.wait_until(
        lambda: running_everywhere(results, attempt + 1),
        180,
        f"attempt {attempt + 1} on every worker",
    )
    requests = cloud.requests(preempted - 0.001)
    deletes = [r["time"] for r in requests if r["method"] == "DELETE" and rig.node_of(r) == NODE]
    operations = cloud.operations()
    deleted_at = min(deletes)
    delete_done = rig.operation_end(operations, "delete", deleted_at)
    creates = [
        r["time"]
        for r in requests
        if r["method"] == "POST" and rig.node_of(r) == NODE and r["status"] == 200
        and r["time"] >= delete_done
    ]  # fmt: skip
    created_at = min(creates)
    ready = rig.operation_end(operations, "create", created_at)
    sample = rig.components(preempted, deleted_at, delete_done, created_at, ready, running)
    events = daemon.events(preempted - 1.0)
    sample.update(rig.ready_to_run_detail([e for e in events if e["t"] >= ready], ready, running))
    return sample, rig.woken_by(events, preempted)


def measure_poll(
    cloud: Cloud,
    scratch: Path,
    poll: float,
    settings: Settings,
    rng: random.Random,
    log: Callable[[str], None],
    root: Path = ROOT,
) -> dict[str, Any]:
    cloud.reset(settings.create_seconds)
    results = scratch / f"results-{poll:g}"
    results.mkdir(parents=True)
    daemon = DaemonProcess(
        scratch / f"daemon-{poll:g}", cloud, poll=poll, results=results, root=root
    )
    try:
        common.wait_until(lambda: running_everywhere(results, 1), 120, "attempt 1 on every worker")
        rows, woken = rig.sample_poll(
            cloud, daemon, results, poll=poll, settings=settings, rng=rng, node=NODE,
            newest=newest_attempt, measure=measure, label="recovery", shown=COMPONENTS, log=log,
        )  # fmt: skip
    finally:
        daemon.stop()
    components = [*COMPONENTS, "total", "overhead", *DETAIL]
    summary = {k: common.summarize([r[k] for r in rows if k in r]) for k in components}
    return {
        "poll_interval_s": poll,
        "samples": len(rows),
        "components_s": summary,
        "overhead_target_s": TARGET_OVERHEAD_S,
        "overhead_median_within_target": summary["overhead"]["median"] <= TARGET_OVERHEAD_S,
        "overhead_max_within_target": summary["overhead"]["max"] <= TARGET_OVERHEAD_S,
        "delete_tick_reasons": dict(Counter(woken)),
        "raw": rows,
    }


def run(
    quick: bool,
    *,
    settings: Settings | None = None,
    progress: Callable[[str], None] = print,
    scratch: Path | None = None,
    daemon_root: Path = ROOT,
    variants: Sequence[str] = VARIANTS,
) -> dict[str, Any]:
    """`scratch`: keep the daemons' configs and logs there (default: a temporary directory).
    `daemon_root`: the source tree the daemon runs from (another one for a before/after).
    `variants`: "single" (one v4-32 slice), "multislice" (bench/recovery_multi.py), "compute"
    and "compute_slice" (bench/recovery_compute.py), or several: at each poll interval one
    after the other, so their figures share the machine's load."""
    settings = settings or (QUICK if quick else FULL)
    rng = random.Random(settings.seed)
    # The same draws for both (the same moments in the poll cycle, the same create times):
    # sample i of the 2 slices is paired with sample i of the single slice.
    multi_rng = random.Random(settings.seed)
    result: dict[str, Any] = {
        "method": __doc__.split("Method.", 1)[1].split("Statistics")[0].strip() if __doc__ else "",
        "parameters": {
            "accelerator_type": TYPE,
            "workers": WORKERS,
            "emulator_create_seconds": settings.create_seconds,
            "emulator_delete_seconds": settings.delete_seconds,
            "emulator_create_spread_polls": settings.create_spread,
            "samples": {f"{k:g}s": v for k, v in settings.samples.items()},
            "seed": settings.seed,
            "daemon_root": None if daemon_root == ROOT else str(daemon_root),
        },
        "recovery": [],
    }
    if "multislice" in variants:
        result["multislice"] = {
            "method": multi.__doc__.split("Method.", 1)[1].strip() if multi.__doc__ else "",
            "parameters": multi.parameters(),
            "recovery": [],
            "versus_single": [],
        }
    shapes = [compute.SHAPES[v] for v in variants if v in compute.SHAPES]
    # Each Compute Engine variant's own draws, seeded like the single slice's (paired samples).
    compute_rngs = {shape.variant: random.Random(settings.seed) for shape in shapes}
    for shape in shapes:
        result[shape.variant] = {
            "method": compute.__doc__.split("Method.", 1)[1].strip() if compute.__doc__ else "",
            "parameters": compute.parameters(shape),
            "recovery": [],
            "versus_tpu": [],
        }
    with tempfile.TemporaryDirectory(prefix="tpucared-bench-recovery-") as tmp:
        where = scratch or Path(tmp)
        with Cloud(settings, where / "hosts") as cloud:
            for poll in settings.samples:
                if "single" in variants:
                    result["recovery"].append(
                        measure_poll(cloud, where, poll, settings, rng, progress, daemon_root)
                    )
                if "multislice" in variants:
                    m = multi.measure_poll(
                        cloud, where, poll, settings, multi_rng, progress, daemon_root
                    )
                    result["multislice"]["recovery"].append(m)
                    if result["recovery"]:
                        versus = multi.versus_single(result["recovery"][-1], m)
                        result["multislice"]["versus_single"].append(versus)
                for shape in shapes:
                    c = compute.measure_poll(
                        cloud, where, poll, settings, compute_rngs[shape.variant], progress,
                        daemon_root, shape,
                    )  # fmt: skip
                    result[shape.variant]["recovery"].append(c)
                    if result["recovery"]:
                        versus = compute.versus_tpu(result["recovery"][-1], c)
                        result[shape.variant]["versus_tpu"].append(versus)
    return result


def _table(components: Mapping[str, Mapping[str, Any]]) -> str:
    rows = []
    for name, s in components.items():
        if not s.get("n"):
            continue
        rows.append(
            [
                name,
                *common.summary_cells(s),
            ]
        )
    return common.table(["component", "n", "median s", "p99 s", "min s", "max s"], rows)


def render(result: Mapping[str, Any]) -> str:
    blocks = []
    params = result["parameters"]
    for r in result["recovery"]:
        title = (
            f"poll {r['poll_interval_s']:g}s, create {params['emulator_create_seconds']:g}s "
            f"+ U(0, {params['emulator_create_spread_polls'] * r['poll_interval_s']:g}s), "
            f"delete {params['emulator_delete_seconds']:g}s "
            f"(overhead target {r['overhead_target_s']:g}s)"
        )
        blocks.append(title + "\n" + _table(r["components_s"]))
    m = result.get("multislice") or {"recovery": [], "versus_single": []}
    for r in m["recovery"]:
        title = (
            f"2 slices x {m['parameters']['accelerator_type_per_slice']}, poll "
            f"{r['poll_interval_s']:g}s, {m['parameters']['preempted_node']} preempted "
            f"(survivors stopped before the replacement was READY: "
            f"{r['survivors_stopped_before_ready']} of {r['samples']}; the delete's tick "
            f"dropped the stop: {r['delete_ticks_that_dropped_a_stop']})"
        )
        blocks.append(title + "\n" + _table(r["components_s"]))
    for v in m["versus_single"]:
        ratios = ", ".join(f"{k} {common.format_ratio(v[k]['ratio'])}" for k in multi.RATIOS)
        blocks.append(f"2 slices / 1 slice at poll {v['poll_interval_s']:g}s (medians): {ratios}")
    for variant in compute.SHAPES:
        if result.get(variant):
            blocks += compute.render(result[variant], _table)
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.recovery", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output-dir", type=Path, default=common.RESULTS_DIR)
    parser.add_argument("--keep", type=Path, help="keep the daemons' configs and logs here")
    parser.add_argument(
        "--daemon-root", type=Path, default=ROOT, help="run the daemon from this source tree"
    )
    parser.add_argument("--name", default="recovery", help="result file name (e.g. a baseline)")
    parser.add_argument(
        "--variant",
        choices=("all", "both", *VARIANTS),
        default="all",
        help="the single-slice slot, the 2-slice multislice slot, the Compute Engine VM, the"
        " Compute Engine 4-VM slice, or all (the default)",
    )
    args = parser.parse_args(argv)
    # "both": the two TPU API variants, as before issue 27
    chosen = {"all": VARIANTS, "both": VARIANTS[:2]}
    variants = chosen.get(args.variant, (args.variant,))
    from bench import run as harness

    def measured(quick: bool) -> dict[str, Any]:
        return run(
            quick, scratch=args.keep, daemon_root=args.daemon_root.resolve(), variants=variants
        )

    path, envelope = harness.run_one(
        args.name, measured, quick=args.quick, output_dir=args.output_dir
    )
    print(render(envelope["result"]))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
