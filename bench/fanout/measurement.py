"""Measuring the methods on a fleet: interleaved runs, their time and CPU, the workloads a
launch leaves behind cleaned up, and the ssh loop extrapolated above the sizes it runs at."""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from bench import common
from bench.fanout.fleets import Fleet
from bench.fanout.methods import Command, Method, Runner, launch_command, methods_for
from bench.fanout.settings import (
    MEASUREMENT_TIMEOUT_S,
    PAUSE_BETWEEN_RUNS_S,
    TAG,
    WORKLOAD_APPEAR_S,
    Settings,
)
from tpucared.ssh import Target
from tpucared_emulator.hosts.processes import find_tagged, kill_tagged


@dataclass
class Run:
    seconds: float
    ok_workers: int
    client_cpu_s: float
    server_cpu_s: float
    retried_workers: int
    errors: list[str]


@dataclass
class Row:
    fleet: str
    workers: int
    command: str
    method: str
    concurrency: int | None
    label: str
    kex: str | None = None
    runs: list[Run] = field(default_factory=list)
    extrapolated_from: int | None = None
    estimate: float | None = None  # extrapolated rows: seconds estimated, no runs

    def median(self) -> float | None:
        if self.estimate is not None:
            return self.estimate
        seconds = [r.seconds for r in self.runs]
        return common.percentile(seconds, 50) if seconds else None


async def measure(
    runner: Runner, method: Method, targets: Sequence[Target], command: Command
) -> Run:
    own, children = common.own_cpu_seconds(), common.children_cpu_seconds()
    server = runner.fleet.server_cpu()
    started = time.perf_counter()
    async with asyncio.timeout(MEASUREMENT_TIMEOUT_S):
        outcomes = await runner.run(method, targets, command)
    seconds = time.perf_counter() - started
    client = common.own_cpu_seconds() - own + common.children_cpu_seconds() - children
    server = runner.fleet.server_cpu() - server
    errors = [f"{o.host}: {o.error}" for o in outcomes if not o.ok]
    return Run(
        seconds=seconds,
        ok_workers=sum(o.ok for o in outcomes),
        client_cpu_s=client,
        server_cpu_s=server,
        retried_workers=sum(o.attempts > 1 for o in outcomes),
        errors=errors[:5],
    )


async def _cleanup(command: Command, workers: int) -> None:
    """Kill what a launch left running (outside the timing).

    A launch returns once the wrapper wrote its pid; the workload itself (the tagged
    process) may appear a moment later, so wait for one per worker before killing.
    """
    if command.tag is None:
        return
    tags = {TAG: command.tag}
    for _ in range(int(WORKLOAD_APPEAR_S / 0.05)):
        if len(await asyncio.to_thread(find_tagged, tags)) >= workers:
            break
        await asyncio.sleep(0.05)
    survivors = await kill_tagged(tags, patience=10.0)
    if survivors:
        raise RuntimeError(f"workloads survived SIGKILL: {survivors}")


async def measure_fleet(
    settings: Settings,
    fleet: Fleet,
    key: asyncssh.SSHKey,
    scratch: Path,
    progress: Callable[[str], None],
) -> list[Row]:
    runner = Runner(fleet, key, scratch)
    rows: list[Row] = []
    try:
        for workers in settings.workers:
            targets = fleet.targets[:workers]
            methods = methods_for(settings, workers, fleet.name)
            if any(m.name == "tpucared-warm" for m in methods):
                await runner.warm_up(targets)
            for command_name in settings.commands:
                group = {
                    m: Row(fleet.name, workers, command_name, m.name, m.concurrency, m.label, m.kex)
                    for m in methods
                }
                for rep in range(settings.reps):
                    shift = rep % len(methods)
                    for method in methods[shift:] + methods[:shift]:
                        command = _command(command_name, scratch, fleet.name)
                        try:
                            run = await measure(runner, method, targets, command)
                        finally:
                            await _cleanup(command, workers)
                        group[method].runs.append(run)
                        progress(
                            f"{fleet.name:8} n={workers:<4} {command_name:6} {method.label:34} "
                            f"rep {rep + 1}/{settings.reps}: {run.seconds:7.3f} s, "
                            f"{run.ok_workers}/{workers} ok"
                            + (f" ({run.errors[0]})" if run.errors else "")
                        )
                        await asyncio.sleep(PAUSE_BETWEEN_RUNS_S)
                rows.extend(group.values())
    finally:
        await runner.close()
    return rows


def _command(name: str, scratch: Path, fleet: str) -> Command:
    if name == "true":
        return Command("true", "true")
    tag = secrets.token_hex(8)
    base = scratch / "runs" / f"{fleet}-{tag}"
    return Command("launch", launch_command(str(base), tag), tag=tag)


def extrapolate_sequential(settings: Settings, rows: list[Row]) -> list[Row]:
    """ssh-loop rows for sizes above sequential_max_workers: per-worker time of the largest
    measured size times the number of workers (no runs; labelled as extrapolated)."""
    extra = []
    for fleet, command in itertools.product(settings.fleets, settings.commands):
        measured = [
            r for r in rows if (r.fleet, r.command, r.method) == (fleet, command, "ssh-loop")
        ]
        if not measured:
            continue
        base = max(measured, key=lambda r: r.workers)
        per_worker = (base.median() or 0.0) / base.workers
        for workers in settings.workers:
            if workers > base.workers:
                extra.append(
                    Row(
                        fleet,
                        workers,
                        command,
                        "ssh-loop",
                        None,
                        f"ssh loop (extrapolated from {base.workers})",
                        extrapolated_from=base.workers,
                        estimate=per_worker * workers,
                    )
                )
    return extra
