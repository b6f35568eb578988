"""Fan-out benchmark: one command on 16 / 64 / 256 workers, tpucared vs parallel-ssh vs ssh loop.

Issue "Benchmarks", item 4. Target: 256 workers in <= 5 s, and faster than parallel-ssh.

Two fleets of workers, both on loopback addresses of this machine, each worker its own address:

    sshd      real OpenSSH sshd processes, 16 addresses each (sshd's compiled-in limit on listen
              sockets is 16), MaxStartups/MaxSessions raised so bursts are not dropped, a temp
              client key in AuthorizedKeysFile, host keys generated in a temp dir. Commands run
              as the user running the benchmark (root in CI).
    emulator  the tpucared emulator in its own process (`ssh_hosts` on), v4-32 nodes created
              through the v2 API with the benchmark's key in `ssh-keys` metadata; each worker
              is an asyncssh server on its own 127.x address, host keys pinned from
              getGuestAttributes as the daemon does.

Commands:

    true      connection cost: handshake, auth, one session, nothing else
    launch    the daemon's detached launch (`tpucared.launch.launch_script`) of `sleep 30` into a
              fresh run directory per worker and measurement; timed until every worker has
              answered `TPUCARED_LAUNCH state=started`. The workloads are killed afterwards by
              an environment tag (all workers are on this machine), outside the timing.

Methods, each timed from start to every worker having returned its result:

    tpucared        run_on_all with a fresh ConnectionPool (what a first contact costs:
                    connect + command + closing the pool), concurrency 64 (the default) and 256
    tpucared warm   run_on_all through a pool already connected to every worker (what the
                    daemon pays on every later command: one channel per worker)
    parallel-ssh    Debian's pssh 2.3.4, -p 64 and -p 256, same key and OpenSSH options;
                    against sshd also with `KexAlgorithms=curve25519-sha256`, the exchange
                    tpucared gets (OpenSSH pairs pick the costlier sntrup761 by default)
    ssh loop        one `ssh` after the other; above `sequential_max_workers` it is not run
                    but extrapolated from the largest measured size (labelled so)

Concurrency values that are >= the number of workers behave alike, so only the first of them is
run (e.g. at 64 workers -p 256 would be -p 64 again). Methods are interleaved and their order
rotated every repetition, so slow phases of a noisy machine spread over all of them. CPU time of
the client side (this process, or pssh + its ssh children) and of the servers (the sshd or
emulator process trees, live and reaped) is measured per run, and the key exchange and cipher
each client negotiates are recorded per fleet.

`python -m bench.fanout profile [--fleet sshd|emulator] [--workers N] [--reps R]` shows where a
cold tpucared fan-out spends its time: client vs server CPU with asyncssh's default cipher
order and with AES-GCM first, then a cProfile (CPU timer) of the client.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench import common
from bench.fanout.fleets import FLEETS
from bench.fanout.measurement import Row, extrapolate_sequential, measure_fleet
from bench.fanout.methods import negotiated
from bench.fanout.profiling import main
from bench.fanout.report import render, result_row, verdicts
from bench.fanout.settings import (
    CLASSIC_KEX,
    PARALLEL_SSH,
    TARGET_SECONDS,
    TARGET_WORKERS,
    WORKLOAD,
    Settings,
    settings_for,
)
from tpucared.logsetup import configure_logging
from tpucared.ssh import ensure_client_key

# bench.run's hooks (run, render, versions), the CLI (main) and what the tests read.
__all__ = ["CLASSIC_KEX", "Settings", "main", "render", "run", "run_async", "versions"]


async def run_async(settings: Settings, progress: Callable[[str], None] = print) -> dict[str, Any]:
    if shutil.which(PARALLEL_SSH) is None:
        raise RuntimeError("parallel-ssh is missing: apt-get install -y pssh")
    configure_logging(level="warning", json=True, stream=sys.stderr)
    started = time.monotonic()
    fleets: dict[str, dict[str, Any]] = {}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="tpucared-bench-fanout-") as tmp:
        scratch = Path(tmp)
        key_path = scratch / "client" / "id_ed25519"
        key = ensure_client_key(key_path, comment="tpucared-bench")
        for name in settings.fleets:
            async with FLEETS[name](max(settings.workers), key, key_path, scratch / name) as fleet:
                fleets[name] = {
                    "description": fleet.description,
                    **fleet.details,
                    "negotiated": await negotiated(fleet, key),
                }
                rows += await measure_fleet(settings, fleet, key, scratch, progress)
    rows += extrapolate_sequential(settings, rows)
    rows.sort(
        key=lambda r: (
            settings.fleets.index(r.fleet),
            r.workers,
            settings.commands.index(r.command),
        )
    )
    results = [result_row(r, rows) for r in rows]
    return {
        "settings": asdict(settings),
        "workload": WORKLOAD,
        "target": {"workers": TARGET_WORKERS, "seconds": TARGET_SECONDS},
        "fleets": fleets,
        "results": results,
        "verdicts": verdicts(results),
        "seconds_total": round(time.monotonic() - started, 1),
    }


def run(
    quick: bool,
    *,
    workers: Sequence[int] | None = None,
    reps: int | None = None,
    fleets: Sequence[str] | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The benchmark (bench.run's entry). Keyword overrides make the tiny mode of the tests."""
    settings = settings_for(quick)
    if workers is not None:
        settings = replace(settings, workers=tuple(workers), sequential_max_workers=max(workers))
    if reps is not None:
        settings = replace(settings, reps=reps)
    if fleets is not None:
        settings = replace(settings, fleets=tuple(fleets))
    return asyncio.run(run_async(settings, progress))


def versions() -> dict[str, str | None]:
    return {"parallel-ssh": common._command_output([PARALLEL_SSH, "--version"])}
