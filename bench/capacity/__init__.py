"""Capacity latency and the cost of hunting (issue "Benchmarks", item 2), side by side with
SkyPilot's and tpucare's retry schedules replayed against the same emulator in the same run.

`python -m bench.run --only capacity [--quick]` (or `python -m bench.capacity [--quick]`);
`python -m bench.capacity --model` prints the simulated trade-off table of docs/daemon.md;
`python -m bench.capacity --queued --queued-serve at-once|scan [--only-group KEY] [--samples N]
[--participants N]`
the daemon's hunt against a queued fleet's (issue 44); `--api compute` runs any preset on
Compute Engine (result `<name>-compute.json`); `--suffix=-x` names the result file
`<name>-x.json`, so a before/after pair leaves the recorded run alone.

Method. One emulator runs in this process (its own thread; a create takes 2 s, a delete 1 s).
Every participant hunts in a zone of its own, so all of them run at once and each has its own
stockouts: a participant is either the real daemon (`python -m tpucared run`, generated config,
poll 10 s, one fleet of 1, 4 or 16 spot slots; default policy unless the group says otherwise;
`provisioning = "direct"`, or "queued": one queued resource per slot, which the emulator serves
as `queued_serve` says) or a replay of another tool's schedule (bench/replay.py: raw aiohttp
requests; SkyPilot 1 slot, tpucare 1, 4 or 16 slots sharing its semaphore of 2). A sample: the
zone's capacity goes to 0 and its nodes are preempted; the participant hunts; exactly
`stockout` seconds later capacity comes back; the sample is the time from that instant to the
winning create's POST for the zone (the first posted after it; with `--capacity-judged end`,
the first still in flight then, so it may be negative; for a queued fleet, to its first node's
createTime, the instant the cloud gave a waiting queued resource the capacity), and, for a
fleet, to the moment every slot has sent one (has one); `ready_s` adds the emulator's
create_seconds: capacity back -> READY, comparable across both semantics and both
provisionings. Once the zone is READY again (and, for the daemon, recorded READY in its
database), a pause, then the next sample. First stockouts are staggered at random over a
minute, so the groups interleave and none of them owns a quiet or a busy phase of the machine.
The cost: every request to the zone from `count_from` seconds into the stockout until capacity
returns, per minute, by kind; per slot is that divided by the fleet's slots. Every instant
comes from the emulator's clock (control calls, request arrival times).

On Compute Engine (`--api compute`, bench/capacity/compute.py) every zone offers one machine
type, tpu7x-standard-4t (one host: a slot is one VM); the daemon's fleet is `api = "compute"`
of spot VMs (`on_preemption = "stop"`: a preempted VM is TERMINATED and keeps its name until
deleted), or, where the TPU preset has a queued fleet, `capacity = "flex-start"` (a bulk MIG
of one VM per slot, 10-minute runs, which waits for capacity on the cloud's side); tpucare's
loop becomes the same loop with `gcloud compute instances create` (bench/replay_compute.py:
insert, then gcloud's waiter, `zoneOperations.wait` with sleeps of 1, 2, ... 5 s after a wait
that came back early, and `instances.get` after a win; source: google-cloud-sdk
api_lib/compute/waiters.py); SkyPilot's replay is left out. A stockout is the zone's capacity
of the machine type at 0 and its RUNNING VMs preempted; READY is RUNNING; the winning insert
is read from the service's insert operations (the request log has no VM names), and with
`--capacity-judged end` an insert is judged when it leaves PROVISIONING, half the create time
after its POST, so the first insert posted up to 1 s before capacity came back may win.
Requests are counted by Compute Engine method (instances.insert, zoneOperations.wait, ...).

Statistics are over a handful of samples per group (bench/common.py): quote the median.
"""

from __future__ import annotations

import dataclasses
import random
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.capacity.model import MODEL_ROWS, model_table, poll_times, simulate
from bench.capacity.participants import Participant, ReplayLoop, run_participant
from bench.capacity.samples import analyse, summarize_group, zone_of
from bench.capacity.settings import (
    BUDGET_PER_FLEET_ZONE,
    BUDGET_PER_SLOT,
    FULL,
    HUNT,
    MODELLED_DEFAULT,
    POLL,
    PREVIOUS_DEFAULT,
    PREVIOUS_POLICY,
    QUEUED,
    QUICK,
    Group,
    Settings,
    on_compute,
)
from bench.detection import TYPE, Cloud
from bench.replay_compute import MACHINE, GcloudComputeWaiter

# bench.run's hooks (run, render), the CLI (main) and what the tests and docs name.
__all__ = [
    "BUDGET_PER_FLEET_ZONE",
    "BUDGET_PER_SLOT",
    "FULL",
    "HUNT",
    "MODELLED_DEFAULT",
    "MODEL_ROWS",
    "PREVIOUS_DEFAULT",
    "PREVIOUS_POLICY",
    "QUEUED",
    "QUICK",
    "Group",
    "Settings",
    "analyse",
    "chosen",
    "main",
    "model_table",
    "on_compute",
    "poll_times",
    "render",
    "run",
    "simulate",
    "summarize_group",
]


# ---------------------------------------------------------------------------------------------
# The benchmark


def run(
    quick: bool, *, settings: Settings | None = None, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    settings = settings or (QUICK if quick else FULL)
    seed = settings.seed if settings.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    participants: list[Participant] = []
    for g in settings.groups:
        for i in range(g.count):
            zone = f"us-bench{len(participants) + 1}-a"
            participants.append(Participant(g, i, zone, random.Random(rng.random())))
    zones = [p.zone for p in participants]
    load_start = common.load_average()
    with (
        tempfile.TemporaryDirectory(prefix="tpucared-capacity-") as tmp,
        Cloud(
            settings.timing,
            offerings={zone: (TYPE,) for zone in zones},
            compute_offerings={zone: (MACHINE,) for zone in zones},
            request_log_size=5_000_000,
            capacity_judged=settings.capacity_judged,
            queued_serve=settings.queued_serve,
            queued_scan_seconds=settings.queued_scan_seconds,
        ) as cloud,
        ReplayLoop() as replays,
    ):
        since = cloud.thread.call(lambda state: state.now())
        threads = []
        for n, p in enumerate(participants):
            thread = threading.Thread(
                target=run_participant,
                args=(p, cloud, replays, settings, Path(tmp), progress),
                name=p.name,
            )
            thread.start()
            threads.append(thread)
            if p.group.tool == "tpucared" and n + 1 < len(participants):
                time.sleep(1.0)  # daemons start one a second: imports and migrations are CPU
        for thread in threads:
            thread.join()
        log = cloud.requests(since)
    # A participant that failed keeps the samples it finished; the failure is in the result
    # (and fails the quick test), so a long run is never thrown away for one broken hunter.
    errors = {p.name: p.error for p in participants if p.error}
    by_zone: dict[str, list[dict[str, Any]]] = {zone: [] for zone in zones}
    for r in log:
        where = zone_of(r["path"])
        if where in by_zone:
            by_zone[where].append(r)
    samples = []
    for p in participants:
        for sample in p.samples:
            try:
                samples.append(analyse(sample, by_zone[p.zone], settings))
            except RuntimeError as exc:
                errors[f"{p.name} at {sample['restored']:.0f}"] = str(exc)
    for name, error in errors.items():
        progress(f"FAILED {name}: {error}")
    model: list[dict[str, Any]] = []
    if settings.model_runs:
        modelled = (("default then", MODELLED_DEFAULT), ("previous default", PREVIOUS_DEFAULT))
        for label, rule in modelled:
            for slots in (1, 4):
                predicted = simulate(
                    rule,
                    slots=slots,
                    runs=settings.model_runs,
                    stockout=settings.stockout,
                    count_from=settings.count_from,
                )
                model.append({"policy": label, "slots": slots, **predicted})
    return {
        "method": __doc__.split("Method.", 1)[1].split("Statistics")[0].strip() if __doc__ else "",
        "parameters": {
            "api": settings.api,
            "stockout_s": settings.stockout,
            "requests_counted_from_s": settings.count_from,
            "stagger_s": settings.stagger,
            "pause_s": list(settings.pause),
            "daemon_poll_interval_s": POLL,
            "emulator_create_seconds": settings.timing.create_seconds,
            "emulator_delete_seconds": settings.timing.delete_seconds,
            "emulator_capacity_judged": settings.capacity_judged,
            "emulator_queued_serve": settings.queued_serve,
            "emulator_queued_scan_seconds": settings.queued_scan_seconds,
            "skypilot": vars(settings.skypilot),
            "tpucare": {
                "list_cache_s": settings.tpucare.list_cache,
                "gcloud_start_s": settings.tpucare.gcloud_start,
                "gcloud_waiter": vars(settings.tpucare.waiter),
            },
            "gcloud_compute_waiter": vars(GcloudComputeWaiter()),
            "compute_machine_type": MACHINE,
            "seed": seed,
        },
        "budget": {
            "requests_per_minute_per_hunting_slot": BUDGET_PER_SLOT,
            "requests_per_minute_per_fleet_and_zone": BUDGET_PER_FLEET_ZONE,
        },
        "load_average_at_start": load_start,
        "errors": errors,
        "groups": [summarize_group(g, samples) for g in settings.groups],
        "model": model,
        "samples": samples,
    }


def render(result: Mapping[str, Any]) -> str:
    rows = []
    for g in result["groups"]:
        if "latency_s" not in g:
            rows.append([g["label"], str(g["slots"]), "0", *["-"] * 8])
            continue
        s, ready = g["latency_s"], g["ready_s"]
        rows.append(
            [
                g["label"],
                str(g["slots"]),
                *common.summary_cells(s),
                common.format_seconds(ready["median"]),
                common.format_seconds(ready["p99"]),
                f"{g['requests_per_minute_per_slot']:.1f}",
                f"{g['requests_per_minute_per_zone'].get('total', 0.0):.1f}",
            ]
        )
    headers = [
        "tool / schedule",
        "slots",
        "n",
        "median s",
        "p99 s",
        "min s",
        "max s",
        "READY median s",
        "READY p99 s",
        "req/min/slot",
        "req/min/zone",
    ]
    kinds = [
        f"{g['key']}: "
        + ", ".join(f"{k} {v:g}" for k, v in g["requests_per_minute_per_zone"].items())
        for g in result["groups"]
        if "requests_per_minute_per_zone" in g
    ]
    errors = [f"FAILED {name}: {error}" for name, error in result.get("errors", {}).items()]
    return "\n".join([common.table(headers, rows), "requests per hunting minute:", *kinds, *errors])


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.capacity", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--model", action="store_true", help="print the simulated trade-off table and exit"
    )
    parser.add_argument("--runs", type=int, default=1000, help="stockouts per modelled row")
    parser.add_argument(
        "--hunt", action="store_true", help="the lone hunting slot against the tight loop only"
    )
    parser.add_argument(
        "--capacity-judged",
        choices=("post", "end"),
        default="post",
        help="when the emulator judges a create's capacity: at the POST or at the operation's end",
    )
    parser.add_argument(
        "--samples", type=int, default=0, help="stockouts per participant (0: the preset's)"
    )
    parser.add_argument(
        "--participants",
        type=int,
        default=0,
        help="participants (zones) per group (0: the preset's): n = participants x samples in "
        "about samples x 80 s, where more samples alone take longer",
    )
    parser.add_argument(
        "--api",
        choices=("tpu", "compute"),
        default="tpu",
        help="the cloud API every participant hunts on: TPU API nodes or Compute Engine VMs",
    )
    parser.add_argument(
        "--queued",
        action="store_true",
        help="the daemon's hunt, the tight loop and a queued fleet, 1 and 16 slots (issue 44)",
    )
    parser.add_argument(
        "--queued-serve",
        choices=("at-once", "scan"),
        default="at-once",
        help="when the emulator gives freed capacity to waiting queued resources",
    )
    parser.add_argument("--queued-scan-seconds", type=float, default=10.0)
    parser.add_argument(
        "--only-group",
        action="append",
        default=[],
        metavar="KEY",
        help="run only this group of the preset (repeatable), e.g. tpucared-queued-16",
    )
    parser.add_argument(
        "--suffix",
        default="",
        help="appended to the result's name (bench/results/<name><suffix>.json), so that a "
        "before/after pair does not overwrite the recorded run",
    )
    args = parser.parse_args(argv)
    if args.model:
        print(model_table(args.runs))
        return 0
    from bench import run as harness

    base = QUEUED if args.queued else HUNT if args.hunt else QUICK if args.quick else FULL
    if args.api == "compute":
        base = on_compute(base)
    settings = chosen(base, args.only_group, args.samples, args.participants)
    settings = dataclasses.replace(
        settings,
        capacity_judged=args.capacity_judged,
        queued_serve=args.queued_serve,
        queued_scan_seconds=args.queued_scan_seconds,
    )

    def judged(quick: bool) -> dict[str, Any]:
        return run(quick, settings=settings)

    name = "capacity"
    if args.hunt:
        name = f"capacity-hunt-{args.capacity_judged}"
    elif args.queued and args.api == "compute":
        name = f"capacity-queued-{args.capacity_judged}"  # queued_serve is the TPU API's
    elif args.queued:
        name = f"capacity-queued-{args.queued_serve}-{args.capacity_judged}"
    if args.api == "compute":
        name += "-compute"  # beside the TPU API's results, never over them
    name += args.suffix
    path, envelope = harness.run_one(name, judged, quick=args.quick, output_dir=common.RESULTS_DIR)
    print(render(envelope["result"]))
    print(f"written to {path}")
    return 0


def chosen(base: Settings, only: Sequence[str], samples: int, participants: int = 0) -> Settings:
    """`base` with only the groups named by key (all if none), `samples` stockouts each if > 0,
    `participants` zones each if > 0."""
    keys = [g.key for g in base.groups]
    unknown = sorted(set(only) - set(keys))
    if unknown:
        raise SystemExit(f"unknown group {unknown}: the preset has {keys}")
    groups = tuple(g for g in base.groups if not only or g.key in only)
    if samples > 0:
        groups = tuple(dataclasses.replace(g, samples=samples) for g in groups)
    if participants > 0:
        groups = tuple(dataclasses.replace(g, count=participants) for g in groups)
    return dataclasses.replace(base, groups=groups)
