"""Shared by every benchmark: summary statistics, the machine and versions a result was measured
on, CPU accounting of processes, the result file, and the plain-text tables printed at the end.

Statistics are over a handful of repetitions on a noisy machine: the median is the figure to
quote, p99 is interpolated between the order statistics (with 5 samples it is almost the
maximum), and min/max are always reported next to it so nobody mistakes a 5-run p99 for a
tail measured over thousands of runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import platform
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# Statistics


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between order statistics."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(samples: Sequence[float], digits: int = 4) -> dict[str, Any]:
    """n, median, p99, min, max, mean of `samples` (seconds, usually), and the samples."""
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "median": round(percentile(samples, 50), digits),
        "p99": round(percentile(samples, 99), digits),
        "min": round(min(samples), digits),
        "max": round(max(samples), digits),
        "mean": round(sum(samples) / len(samples), digits),
        "samples": [round(s, digits) for s in samples],
    }


def ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return round(value / reference, 3)


# ---------------------------------------------------------------------------------------------
# CPU accounting


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # After the ")" closing the command name: fields[0] is field 3 (state), fields[1] the ppid,
    # fields[11:15] utime, stime, cutime, cstime (fields 14..17 of proc(5)).
    return stat.rsplit(")", 1)[1].split()


def tree_cpu_seconds(roots: Iterable[int]) -> float:
    """CPU time (user + system) used so far by the processes `roots`, their live descendants,
    and every descendant already reaped.

    Summing utime + stime + cutime + cstime over the live processes of the tree counts each
    CPU second once: a dead process's time sits in the cutime of the live ancestor that
    reaped it. So a server that forks per connection (sshd) is accounted whether its
    connection handlers have exited or are still alive (pooled connections). Detached
    processes (reparented to init) leave the tree and are not counted.
    """
    wanted = set(roots)
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is None:
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(f) for f in fields[11:15]) / _CLOCK_TICKS
    total = 0.0
    for pid in times:
        ancestor, hops = pid, 0
        while ancestor not in wanted and ancestor > 1 and hops < 64:
            ancestor, hops = parents.get(ancestor, 0), hops + 1
        if ancestor in wanted:
            total += times[pid]
    return total


def own_cpu_seconds() -> float:
    """CPU time of this process (all threads)."""
    return time.process_time()


def children_cpu_seconds() -> float:
    """CPU time of the children this process has waited for (and their waited-for children)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------------------------------
# Where a result was measured


def _command_output(argv: Sequence[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout + done.stderr).strip() or None


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _memory_mb() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return None


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict[str, Any]:
    """The machine: what makes two results comparable or not."""
    return {
        "platform": platform.platform(),
        "kernel": platform.release(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_mb": _memory_mb(),
        "load_average_at_start": load_average(),
        "open_files_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }


def _package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def openssh_version() -> str | None:
    """`OpenSSH_9.2p1 Debian-2+deb12u10, OpenSSL 3.0.19 ...` as `ssh -V` prints it."""
    return _command_output(["ssh", "-V"])


def versions(extra: Mapping[str, str | None] | None = None) -> dict[str, str | None]:
    return {
        "python": sys.version.split()[0],
        "tpucared": _package_version("tpucared"),
        "asyncssh": _package_version("asyncssh"),
        "cryptography": _package_version("cryptography"),
        "openssh": openssh_version(),
        **(extra or {}),
    }


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# Output


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write `data` as indented JSON, atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def format_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.2f}"


def summary_cells(
    summary: Mapping[str, Any], stats: Sequence[str] = ("median", "p99", "min", "max")
) -> list[str]:
    """A `summarize` result as table cells: its n, then the statistics asked for, in seconds."""
    return [str(summary["n"]), *(format_seconds(summary[k]) for k in stats)]


def format_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, markdown: bool = False) -> str:
    """A fixed-width text table, or a Markdown one. Columns after the first few that look
    numeric are right-aligned."""
    body = [list(map(str, row)) for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]
    numeric = [
        bool(body) and all(re.fullmatch(r"[-~]?[\d.]+x?|-", r[i]) for r in body)
        for i in range(len(headers))
    ]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(cells, widths, numeric, strict=True)
        ]
        return ("| " + " | ".join(parts) + " |") if markdown else "  ".join(parts).rstrip()

    out = [line(headers)]
    if markdown:
        rules = [
            ("-" * (w + 1) + ":") if num else ("-" * (w + 2))
            for w, num in zip(widths, numeric, strict=True)
        ]
        out.append("|" + "|".join(rules) + "|")
    else:
        out.append("  ".join("-" * w for w in widths))
    out.extend(line(r) for r in body)
    return "\n".join(out)


def free_port(*addresses: str) -> int:
    """A TCP port nothing listens on right now at any of `addresses` (default 127.0.0.1), for a
    daemon's HTTP endpoint, an emulator or an sshd. "0.0.0.0" asks for a port free on every
    address (the emulator's workers listen on 127.x.y.z); several addresses, one free on each.
    The one definition for the benchmarks and the tests."""
    first, *others = addresses or ("127.0.0.1",)
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((first, 0))
            port = int(probe.getsockname()[1])
        try:
            with contextlib.ExitStack() as stack:
                for address in others:
                    sock = stack.enter_context(socket.socket())
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((address, port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no port free on every one of {addresses}")


def start_daemon(config: Path, log: Any, *, cwd: Path) -> subprocess.Popen[bytes]:
    """The real daemon, `python -m tpucared run -c CONFIG`, as the benchmarks run it: its
    output to `log` (an open binary file), imported from `cwd`, without the caller's
    TPUCARED_* variables (a TPUCARED_CONFIG in the environment must not leak in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUCARED_")}
    return subprocess.Popen(
        [sys.executable, "-m", "tpucared", "run", "-c", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=env,
    )


def stop_process(process: subprocess.Popen[bytes], grace: float = 60.0) -> int:
    """SIGTERM, then SIGKILL after `grace` seconds; returns the exit status."""
    process.terminate()
    try:
        return process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def wait_until(check: Callable[[], Any], within: float, what: str) -> Any:
    """Poll `check` every 50 ms until it returns something truthy (returned), or raise
    TimeoutError naming `what` after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"benchmark: timed out after {within:g}s waiting for {what}")
        time.sleep(0.05)
