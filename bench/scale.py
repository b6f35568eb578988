"""Scale: one daemon managing 1,000 and 10,000 nodes across 4 zones, at steady state.

`python -m bench.run --only scale [--quick]` (or `python -m bench.scale [--quick]
[--size N ...] [--variant none|probe ...] [--api tpu|compute]`).

Method. Three processes. The emulator runs in its own process (`python -m bench.scale
emulator ...`, started by this benchmark), so the daemon's CPU is measured alone; this process
only starts the other two, reads files and /proc, and sleeps. The emulator is seeded before it
serves: N single-host v5litepod-8 spot nodes, READY, spread over 4 fleets of N/4, one fleet
per zone, each node named and labelled as the daemon names and labels its own
(`tpucared-fleet`, `tpucared-owner`, the daemon's key in `ssh-keys`). The daemon is the real
`tpucared run -c CONFIG` process (`tpucared.cli.main.main`, with the one logger
`tpucared.runtime.reconciler` at DEBUG so that ticks that do nothing log their "reconcile.tick" line
too; nothing else is logged more) against a fresh database: it finds every node unrecorded,
adopts them all (what a restart after a lost database looks like), and settles. Convergence
(daemon start -> every slot READY in its database, and for the probe variant a workload
attempt running on every slot, then two ticks in a row with no action, then for the probe
variant every launch's SSH done and 30 s more for the probes that follow) is a side figure.

Then, at steady state, a window of T consecutive ticks at the poll interval (the daemon's
`daemon.poll_interval`; ticks start on the poll, so the window is T polls long):
- tick duration: the `seconds` of each tick's log line (observe, plan, execute; for the
  inline-probe design also the probe), p50/p99 over the T ticks;
- CPU per tick: the daemon process's utime+stime (/proc/PID/stat, all threads) over the
  window / T: everything the daemon does per poll, including the metrics refresh after each
  tick and anything running in the background (probes, in the per-slot design);
- RSS now and peak: VmRSS and VmHWM (/proc/PID/status) at the end of the window; the peak
  includes the adoption burst;
- API requests per tick: the emulator's request log between the first and last tick line of
  the window (exclusive, inclusive), by call, / T; compared with the list pages a tick needs
  (per zone ceil(nodes / page size), page size = the `pageSize` the daemon sent, clamped by
  the emulator's maximum of 1000);
- DB size: state.db + state.db-wal (+ -shm) at the end of the window.
Variants: "none" (fleets without a workload) and "probe" (a `[fleet.workload]` whose run is
`sleep 100000`, the emulator's simulated SSH hosts on: every worker is a real SSH server in
the emulator process; the daemon launches the workload on every slot and then probes every
worker). The emulator's own CPU per tick is recorded too: at 10,000 nodes it serves the same
lists.

`--api compute` (issue 27, variant none only): Compute Engine fleets instead, seeded with N
spot tpu7x-standard-4t instances RUNNING in the same fleets and zones, and instances.list pages
of at most 500 (`maxResults`) against the TPU API's 1,000, plus one instanceGroupManagers.list
a zone (multi-host slices, issue 28: `other_lists_per_tick`): bench/scale_api.py.

`--db postgresql` (issue 31): the daemon's database on a real PostgreSQL server started for
the run (the tests' server, `fsync=off`), one database a measurement: bench/scale_db.py.

Statistics: tick duration is summarized over the T ticks of one window (median and p99 of
T samples: with T = 30 the p99 is close to the maximum, reported next to it).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import common, scale_api
from bench.scale_api import APIS, expected_list_pages, fleet_keys, list_kind, page_parameter
from bench.scale_api import request_kind as _request_kind
from bench.scale_db import DATABASES, BenchDb, databases
from bench.scale_fleet import TYPE, ZONES, fleet_layout
from bench.scale_procs import (
    ROOT,
    SSH_USER,
    WORKLOAD_RUN,
    DaemonProcess,
    EmulatorProcess,
    add_emulator_command,
    daemon_config,
    keep_logs,
    log_problems,
    machine_cpu_ticks,
    probe_design,
    proc_cpu_seconds,
    proc_memory_mb,
    serve_emulator,
    steal_share,
    wait_until,
)
from bench.scale_report import profile_top, render, render_row
from bench.scale_settings import FULL, PROBE_SETTLE_S, QUICK, VARIANTS, Settings
from bench.scale_storm import (
    Storm,
    add_storm_arguments,
    set_create_seconds,
    storm_figures,
    storm_settings,
    wait_recovered,
)


def _tick_time(event: Mapping[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


# ---------------------------------------------------------------------------------------------
# One measurement


def measure(
    size: int,
    variant: str,
    settings: Settings,
    scratch: Path,
    log: Callable[[str], None],
    make_db: Callable[[Path], BenchDb],
) -> dict[str, Any]:
    from tpucared.ssh.keys import ensure_client_key, ssh_keys_metadata_entry

    directory = scratch / f"{variant}-{size}"
    directory.mkdir(parents=True)
    db = make_db(directory)
    key = ensure_client_key(directory / "id_ed25519")
    ssh_port = common.free_port() if variant == "probe" else None
    poll = settings.poll_interval
    t0 = time.monotonic()
    # One deadline for the whole convergence (hosts up, nodes adopted, workloads running).
    budget = settings.converge_limit or 180 + size * (0.4 if variant == "probe" else 0.06)
    end = t0 + budget
    emulator = EmulatorProcess(
        directory,
        size,
        ssh_keys_metadata_entry(SSH_USER, key),
        ssh_port=ssh_port,
        timeout=budget,
        accelerator_type=settings.accelerator_type,
        api=settings.api,
        create_quota=settings.storm.create_quota if variant == "storm" else None,
    )
    log(f"scale {variant} n={size}: emulator seeded in {time.monotonic() - t0:.1f} s")
    config = daemon_config(
        directory,
        emulator.url,
        size,
        poll=poll,
        variant=variant,
        ssh_port=ssh_port or 22,
        accelerator_type=settings.accelerator_type,
        fleet_keys=fleet_keys(settings.api),
        policy=settings.storm.policy if variant == "storm" else None,
        db=db.setting,
    )
    daemon = DaemonProcess(
        directory,
        config,
        settings.daemon_path,
        profile=settings.profile,
        gc_threshold=settings.gc_threshold,
    )
    try:
        # Convergence: every slot READY in the daemon's own database (and running the workload).
        ready_sql = "SELECT count(*) FROM nodes WHERE phase = 'ready'"
        running_sql = "SELECT count(*) FROM workload_attempts WHERE ended_at IS NULL"

        def progress() -> str:
            ready, running = db.count(ready_sql), db.count(running_sql)
            return (
                f"{ready} READY and {running} "
                f"attempts running in the daemon's database, "
                f"{time.monotonic() - daemon.started:.0f} s after its start; "
                f"{log_problems(directory / 'emulator.log')}; {log_problems(daemon.log_path)}"
            )

        wait_until(
            lambda: db.count(ready_sql) == size,
            max(30.0, end - time.monotonic()),
            f"{size} READY nodes in the daemon's database",
            daemon,
            progress,
        )
        ready_s = time.monotonic() - daemon.started
        running_s = None
        if variant == "probe":
            wait_until(
                lambda: db.count(running_sql) == size,
                max(30.0, end - time.monotonic()),
                f"a workload attempt running on each of {size} slots",
                daemon,
                progress,
            )
            running_s = time.monotonic() - daemon.started

        def settled() -> bool:
            daemon.poll_log()
            quiet = daemon.ticks[-settings.settle_ticks :]
            return len(quiet) == settings.settle_ticks and all(not t["actions"] for t in quiet)

        wait_until(
            settled,
            60 + 20 * poll + size * 0.05,
            "ticks with nothing to do",
            daemon,
            lambda: f"last ticks: {daemon.ticks[-3:]}",
        )
        steady_s = time.monotonic() - daemon.started
        launched_s = None
        if variant == "probe":
            # Every attempt is recorded running before its launch's SSH is done: launches, and
            # the probe that follows each, go on after the quiet ticks. The window starts
            # PROBE_SETTLE_S after the last launch ended, so it holds the periodic probes only.
            wait_until(
                lambda: daemon.poll_log() is not None and daemon.launched >= size,
                max(30.0, end - time.monotonic()),
                f"{size} launches done",
                daemon,
                lambda: f"{daemon.launched} launches done",
            )
            launched_s = time.monotonic() - daemon.started
            time.sleep(PROBE_SETTLE_S)
            daemon.poll_log()
        log(
            f"scale {variant} n={size}: READY in {ready_s:.1f} s, steady in {steady_s:.1f} s; "
            f"measuring {settings.ticks} ticks"
        )

        # The window: from the last settled tick's line to the T-th line after it.
        first = len(daemon.ticks) - 1
        start_event = daemon.ticks[first]
        if settings.profile:
            daemon.process.send_signal(signal.SIGUSR1)
        cpu_start = proc_cpu_seconds(daemon.pid)
        emu_cpu_start = proc_cpu_seconds(emulator.pid)
        machine_start = machine_cpu_ticks()
        wall_start = time.monotonic()
        storm = Storm(emulator.url, size, every=poll) if variant == "storm" else None
        if storm is not None:
            set_create_seconds(emulator.url, settings.storm.create_seconds)
            storm.start()

        def window_done() -> bool:
            daemon.poll_log()
            return len(daemon.ticks) > first + settings.ticks

        wait_until(
            window_done,
            settings.ticks * poll * 4 + 60,
            f"{settings.ticks} ticks",
            daemon,
        )
        cpu = proc_cpu_seconds(daemon.pid) - cpu_start
        emu_cpu = proc_cpu_seconds(emulator.pid) - emu_cpu_start
        stolen = steal_share(machine_start, machine_cpu_ticks())
        storm_row = None
        if storm is not None:
            storm.stop()
            recovery = wait_recovered(
                lambda: size - db.count(ready_sql), settings.storm.recovery_limit
            )
            storm_row = storm_figures(storm, emulator.requests(storm.started_at), recovery)
        profile: list[str] | None = None
        if settings.profile:
            daemon.process.send_signal(signal.SIGUSR2)
            wait_until(daemon.profile_path.exists, 60, "the profile", daemon)
            time.sleep(1.0)  # dump_stats writes the file in one go, but let it finish
            profile = profile_top(daemon.profile_path)
        wall = time.monotonic() - wall_start
        memory = proc_memory_mb(daemon.pid)
        window = daemon.ticks[first + 1 : first + 1 + settings.ticks]
        end_event = window[-1]
        started_at, ended_at = _tick_time(start_event), _tick_time(end_event)
        requests = [r for r in emulator.requests(started_at) if r["time"] <= ended_at]
        db_size = db.size()
        stats = db.count("SELECT count(*) FROM events")
        workers = db.count("SELECT count(*) FROM workers")
    finally:
        code = daemon.stop()
        emulator.stop()
        db.close()
    if code not in (0, -signal.SIGTERM):
        log(f"scale {variant} n={size}: the daemon exited with {code}")

    ticks = len(window)
    kinds = Counter(_request_kind(r) for r in requests)
    listed, param = list_kind(settings.api), page_parameter(settings.api)
    page_sizes = sorted(
        {str(r["query"].get(param)) for r in requests if _request_kind(r) == listed}
    )
    sent = page_sizes[0] if len(page_sizes) == 1 and page_sizes[0] != "None" else None
    pages = expected_list_pages(size, int(sent) if sent else None, settings.api)
    others = scale_api.other_lists(size, settings.api)
    busy = [t for t in window if t["actions"]]
    # Slot probes the ticks started (each probes every worker of its slice, in one fan-out).
    probes = sum(int(t.get("probes", 0)) for t in window)
    return {
        "nodes": size,
        "variant": variant,
        "api": settings.api,
        "zones": len(ZONES),
        "fleets": [{"fleet": f, "zone": z, "size": n} for f, z, n in fleet_layout(size)],
        "poll_interval_s": poll,
        "ticks": ticks,
        "window_s": round(wall, 2),
        "ticks_with_actions": len(busy),
        "nodes_listed_per_tick": sorted({int(t["nodes_listed"]) for t in window}),
        "convergence_s": {
            "emulator_seeded": emulator.info["seed_seconds"],
            "all_ready": round(ready_s, 1),
            "all_running": round(running_s, 1) if running_s is not None else None,
            "steady": round(steady_s, 1),
            "all_launched": round(launched_s, 1) if launched_s is not None else None,
        },
        "tick_s": common.summarize([float(t["seconds"]) for t in window]),
        # Where the tick's wall time went (the daemon logs list and plan since issue 17, the
        # plan's snapshot read since issue 31's fifth round).
        **{
            f"tick_{phase}_s": common.summarize([float(t[f"{phase}_seconds"]) for t in window])
            for phase in ("list", "plan", "read")
            if all(f"{phase}_seconds" in t for t in window)
        },
        "cpu_ms_per_tick": round(cpu * 1000 / ticks, 1),
        "workers": workers,
        "probes": {
            "slices_per_tick": round(probes / ticks, 1),
            "workers_per_tick": round(probes * workers / size / ticks, 1),
            # An upper bound: everything the daemon did in the window over the workers probed.
            "cpu_ms_per_worker": round(cpu * 1000 * size / (probes * workers), 3)
            if probes
            else None,
        },
        "emulator_cpu_ms_per_tick": round(emu_cpu * 1000 / ticks, 1),
        "cpu_steal_share": stolen,  # the hypervisor's share of the window (scale_procs.py)
        "memory": memory,
        "api_requests": {
            "total": len(requests),
            "per_tick": round(len(requests) / ticks, 2),
            "by_call_per_tick": {k: round(v / ticks, 2) for k, v in sorted(kinds.items())},
            "page_size_sent": page_sizes,
            "list_pages_per_tick": pages,
            "other_lists_per_tick": others,
            "only_list_pages": set(kinds) <= {listed, *others}
            and len(requests) == (pages + sum(others.values())) * ticks,
        },
        "db": {**db_size, "events": stats, "kind": settings.db},
        **({"storm": storm_row} if storm_row is not None else {}),
        **({"profile_top": profile} if profile is not None else {}),
    }


def run(
    quick: bool,
    *,
    settings: Settings | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    settings = settings or (QUICK if quick else FULL)
    result: dict[str, Any] = {
        "method": __doc__.split("Method.", 1)[1].split("Statistics:")[0].strip() if __doc__ else "",
        "parameters": {
            "sizes": list(settings.sizes),
            "variants": list(settings.variants),
            "probe_sizes": list(settings.probe_sizes or settings.sizes),
            "ticks_per_window": settings.ticks,
            "poll_interval_s": settings.poll_interval,
            "zones": list(ZONES),
            "accelerator_type": settings.accelerator_type,
            "api": settings.api,
            **(
                {"machine_type": fleet_keys("compute")["machine_type"]}
                if settings.api == "compute"
                else {}
            ),
            "workload_run": WORKLOAD_RUN,
            "emulator": "own process",
            "probe_design": probe_design(settings.daemon_path or ROOT),
            "daemon_source": str(settings.daemon_path or ROOT),
            "daemon_gc_threshold": settings.gc_threshold,
            "db": settings.db,
        },
        "results": [],
        "failures": [],
    }
    with (
        tempfile.TemporaryDirectory(prefix="tpucared-bench-scale-") as tmp,
        databases(settings.db) as make_db,
    ):
        for variant in settings.variants:
            sizes = settings.sizes
            if variant == "probe" and settings.probe_sizes is not None:
                sizes = settings.probe_sizes
            for size in sizes:
                try:
                    row = measure(size, variant, settings, Path(tmp), progress, make_db)
                except (RuntimeError, TimeoutError, OSError) as exc:
                    # At 10,000 SSH servers the machine may give out: say where, go on.
                    progress(f"scale {variant} n={size}: FAILED: {exc}")
                    result["failures"].append(
                        {"nodes": size, "variant": variant, "error": str(exc)[-2000:]}
                    )
                    continue
                finally:
                    if settings.keep_logs is not None:
                        keep_logs(Path(tmp) / f"{variant}-{size}", settings.keep_logs)
                progress(render_row(row))  # one line: the table comes once, at the end
                result["results"].append(row)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    description = __doc__.split("\n")[0] if __doc__ else None
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=description)
    sub = parser.add_subparsers(dest="command")
    add_emulator_command(sub)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--type", default=TYPE, help=f"every node's accelerator type (default {TYPE})"
    )
    parser.add_argument("--api", choices=APIS, default="tpu", help="TPU API or Compute Engine")
    parser.add_argument("--db", choices=DATABASES, default="sqlite", help="the daemon's database")
    parser.add_argument("--size", type=int, action="append", help="node counts (repeatable)")
    parser.add_argument("--variant", choices=VARIANTS, action="append")
    parser.add_argument("--ticks", type=int, default=None)
    parser.add_argument("--poll", type=float, default=None)
    parser.add_argument("--output-dir", type=Path, default=common.RESULTS_DIR)
    parser.add_argument("--name", default="scale", help="result file name (default: scale)")
    parser.add_argument("--profile", action="store_true", help="cProfile the daemon (diagnostic)")
    parser.add_argument(
        "--keep-logs", type=Path, default=None, help="copy the daemon's and emulator's logs here"
    )
    add_storm_arguments(parser)
    parser.add_argument(
        "--gc-threshold", type=int, default=None, help="gc.set_threshold(N) in the daemon"
    )
    parser.add_argument(
        "--converge-limit", type=float, default=None, help="seconds to converge, per size"
    )
    parser.add_argument(
        "--daemon-path",
        type=Path,
        default=None,
        help="run the daemon from this source tree (before/after comparisons)",
    )
    args = parser.parse_args(argv)
    if args.command == "emulator":
        asyncio.run(serve_emulator(args))
        return 0
    base = QUICK if args.quick else FULL
    settings = Settings(
        sizes=tuple(args.size or base.sizes),
        variants=tuple(args.variant or base.variants),
        ticks=args.ticks or base.ticks,
        poll_interval=args.poll or base.poll_interval,
        daemon_path=args.daemon_path,
        profile=args.profile,
        gc_threshold=args.gc_threshold,
        converge_limit=args.converge_limit,
        accelerator_type=args.type,
        storm=storm_settings(args),
        api=args.api,
        keep_logs=args.keep_logs,
        db=args.db,
    )
    if args.api == "compute" and set(settings.variants) != {"none"}:
        parser.error("--api compute measures the variant none only (no SSH hosts, no storm)")
    from bench import run as harness

    # A profiled run's figures carry the profiler's overhead: never under the reported name.
    name = "scale-profile" if args.profile and args.name == "scale" else args.name
    path, envelope = harness.run_one(
        name,
        lambda quick: run(quick, settings=settings),
        quick=args.quick,
        output_dir=args.output_dir,
    )
    print(render(envelope["result"]))
    for row in envelope["result"]["results"]:
        print("\n".join(row.get("profile_top", [])))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
