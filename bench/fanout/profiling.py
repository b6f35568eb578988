"""`python -m bench.fanout profile`: where a cold tpucared fan-out spends its time (for the
analysis in docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import asyncssh

from bench import common
from bench.fanout.fleets import FLEETS
from bench.fanout.settings import PAUSE_BETWEEN_RUNS_S
from tpucared.logsetup import configure_logging
from tpucared.ssh import ConnectionPool, client_options, ensure_client_key, run_on_all

# AES-GCM first, as the emulator's servers order them: what the "ciphers" comparison tries.
AES_GCM_FIRST = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes256-ctr")


async def _profile(fleet_name: str, workers: int, concurrency: int, command: str, reps: int) -> str:
    """Where a cold tpucared fan-out spends its time, in three parts:

    1. the split of CPU between client and servers (no profiler), `reps` times, alternating
       asyncssh's default cipher order (chacha20-poly1305 first) with AES-GCM first;
    2. one run under cProfile with a CPU-time timer (the machine is shared, so wall-clock
       profiles mostly show waiting for a core). The profiler's own overhead inflates the
       Python-heavy parts: read the proportions, not the totals.
    """
    configure_logging(level="warning", json=True, stream=sys.stderr)
    out = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="tpucared-bench-profile-") as tmp:
        scratch = Path(tmp)
        key_path = scratch / "client" / "id_ed25519"
        key = ensure_client_key(key_path)
        async with FLEETS[fleet_name](workers, key, key_path, scratch / fleet_name) as fleet:
            targets = fleet.targets[:workers]
            await run_on_all(targets[:4], "true", key=key)  # first-use costs, untimed
            base = client_options(key)
            variants = {
                "default ciphers": base,
                "AES-GCM first": asyncssh.SSHClientConnectionOptions(
                    options=base, encryption_algs=list(AES_GCM_FIRST)
                ),
            }
            samples: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
            for _ in range(reps):
                for name, options in variants.items():
                    server, cpu = fleet.server_cpu(), time.process_time()
                    started = time.perf_counter()
                    async with ConnectionPool(
                        key, concurrency=concurrency, connect_timeout=60.0, options=options
                    ) as pool:
                        results = await run_on_all(targets, command, pool=pool)
                    wall = time.perf_counter() - started
                    if not all(r.ok for r in results):
                        raise RuntimeError(f"{name}: {[r for r in results if not r.ok][:3]}")
                    samples[name].append(
                        (wall, time.process_time() - cpu, fleet.server_cpu() - server)
                    )
                    await asyncio.sleep(PAUSE_BETWEEN_RUNS_S)
            out.write(
                f"{fleet_name}, {workers} workers, c={concurrency}, {command!r}, {reps} reps "
                "(medians; all workers ok):\n"
            )
            for name, runs in samples.items():
                wall, client, server = (
                    common.percentile([r[i] for r in runs], 50) for i in range(3)
                )
                out.write(
                    f"  {name:16} wall {wall:6.3f} s  client CPU {client:6.3f} s  "
                    f"server CPU {server:6.3f} s  per worker: client "
                    f"{client / workers * 1000:.1f} ms, server "
                    f"{server / workers * 1000:.1f} ms\n"
                )
            profiler = cProfile.Profile(time.process_time)
            profiler.enable()
            await run_on_all(targets, command, key=key, concurrency=concurrency)
            profiler.disable()
    out.write("\ncProfile (CPU time, default ciphers), by own time:\n")
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(20)
    stats.sort_stats("cumulative").print_stats(30)
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout")
    sub = parser.add_subparsers(dest="what", required=True)
    profile = sub.add_parser("profile", help="where a cold tpucared fan-out spends its time")
    profile.add_argument("--fleet", choices=list(FLEETS), default="sshd")
    profile.add_argument("--workers", type=int, default=256)
    profile.add_argument("--concurrency", type=int, default=64)
    profile.add_argument("--command", default="true")
    profile.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    if not 1 <= args.reps <= 20 or not 1 <= args.workers <= 1000:
        parser.error("--reps must be in 1..20 and --workers in 1..1000")
    text = asyncio.run(
        _profile(args.fleet, args.workers, args.concurrency, args.command, args.reps)
    )
    print(text)
    return 0
