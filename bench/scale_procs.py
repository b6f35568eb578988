"""The scale benchmark's processes: the seeded emulator (`python -m bench.scale emulator`),
the real daemon whose log is followed for its "reconcile.tick" lines, and what /proc and the
daemon's database say about them. bench/scale.py measures with these; its docstring has the
method."""

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from bench import common
from bench import daemon_config as configs  # `daemon_config` below is this module's
from bench.scale_fleet import OWNER, PROJECT, RUNTIME, TYPE, fleet_layout

ROOT = Path(__file__).resolve().parents[1]
SSH_USER = "tpucared"
WORKLOAD_RUN = "sleep 100000"
EMULATOR_MAX_PAGE = 1000  # EmulatorOptions.max_page_size


# The daemon with one logger more verbose than `tpucared run` leaves it: the reconciler's
# "reconcile.tick" line is logged at debug when the tick did nothing, and those are the ticks
# measured.
# `--log-level debug` would turn on every library's debug output and distort the CPU figures.
_DAEMON_BOOT = (
    "import logging, sys; "
    "logging.getLogger('tpucared.runtime.reconciler').setLevel(logging.DEBUG); "
    "from tpucared.cli.main import main; "
    "sys.exit(main(['run', '-c', sys.argv[1]]))"
)
# The same under cProfile, for `--profile` (a diagnostic: the profiler's own overhead inflates
# every figure, so profiled runs are never the reported ones). SIGUSR1 starts profiling the
# main thread (the event loop: aiosqlite's thread is not seen), SIGUSR2 stops it and writes
# the stats to argv[2].
_DAEMON_PROFILE_BOOT = (
    "import cProfile, logging, signal, sys; "
    "logging.getLogger('tpucared.runtime.reconciler').setLevel(logging.DEBUG); "
    "p = cProfile.Profile(); "
    "signal.signal(signal.SIGUSR1, lambda *_: p.enable()); "
    "signal.signal(signal.SIGUSR2, lambda *_: (p.disable(), p.dump_stats(sys.argv[2]))); "
    "from tpucared.cli.main import main; "
    "sys.exit(main(['run', '-c', sys.argv[1]]))"
)


# ---------------------------------------------------------------------------------------------
# /proc


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of the process (every thread), not of its children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_ticks() -> tuple[int, int]:
    """(steal, total) clock ticks of every CPU since boot (/proc/stat): the share of a window
    the hypervisor gave to other guests. On this shared 2-core VM it swings from ~0 to 40 %
    between runs, and with it every figure, so each run reports it."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(start: tuple[int, int], end: tuple[int, int]) -> float:
    """The share of the CPU time between two `machine_cpu_ticks` that was stolen."""
    total = end[1] - start[1]
    return round((end[0] - start[0]) / total, 3) if total > 0 else 0.0


def proc_memory_mb(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) in MiB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mb": out["VmRSS"], "peak_rss_mb": out["VmHWM"]}


def db_size_mb(db: Path) -> dict[str, float]:
    sizes = {}
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{db}{suffix}")
        sizes[suffix or "db"] = path.stat().st_size if path.exists() else 0
    return {
        "db_mb": round(sizes["db"] / 2**20, 2),
        "wal_mb": round(sizes["-wal"] / 2**20, 2),
        "shm_mb": round(sizes["-shm"] / 2**20, 2),
        "total_mb": round(sum(sizes.values()) / 2**20, 2),
    }


# ---------------------------------------------------------------------------------------------
# The emulator process


def add_emulator_command(sub: Any) -> None:
    """`python -m bench.scale emulator ...`: the seeded emulator process (internal)."""
    emulator = sub.add_parser("emulator", help="(internal) the seeded emulator process")
    emulator.add_argument("--nodes", type=int, required=True)
    emulator.add_argument("--ssh-keys", required=True)
    emulator.add_argument("--ssh-port", type=int, default=None)
    emulator.add_argument("--hosts-dir", default=None)
    emulator.add_argument("--hosts-timeout", type=float, default=600.0)
    emulator.add_argument("--seed", type=int, default=1)
    emulator.add_argument("--type", default=TYPE)
    emulator.add_argument("--api", choices=("tpu", "compute"), default="tpu")
    emulator.add_argument("--create-quota", type=int, default=None)


async def serve_emulator(args: argparse.Namespace) -> None:
    """The emulator process: seed, serve, report readiness on stdout, run until SIGTERM."""
    from tpucared.logsetup import configure_logging
    from tpucared_emulator import EmulatorOptions
    from tpucared_emulator.hosts import SshWorkerHosts
    from tpucared_emulator.server import EmulatorServer

    # stdout carries the readiness line; the emulator's own logs go to stderr (a file).
    configure_logging(level="warning", json=True, stream=sys.stderr)
    # Each simulated worker is a listening socket, each pooled SSH connection one more.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.monotonic()
    options = EmulatorOptions(
        create_seconds=0.0,  # seeded nodes are READY at the first timer run
        delete_seconds=0.5,
        ssh_hosts=args.ssh_port is not None,
        ssh_port=args.ssh_port or 22,
        hosts_dir=args.hosts_dir,
        seed=args.seed,
        create_requests_per_minute=args.create_quota,
    )
    server = EmulatorServer(options)
    state = server.state
    if args.api == "compute":  # bench/scale_api.py: Compute Engine instances (no SSH hosts)
        from bench.scale_api import seed_compute

        running = seed_compute(server, args.nodes, args.ssh_keys)
        await server.start("127.0.0.1", 0)
        seconds = round(time.monotonic() - started, 2)
        line = {"url": server.url, "nodes": running, "states": ["RUNNING"], "seed_seconds": seconds}
        await _serve(server, line)
        return
    labels_owner = {"tpucared-owner": OWNER}
    for fleet, zone, slots in fleet_layout(args.nodes):
        body = {
            "acceleratorType": args.type,
            "runtimeVersion": RUNTIME,
            "schedulingConfig": {"spot": True},
            "networkConfig": {"enableExternalIps": True},
            "labels": {"tpucared-fleet": fleet, **labels_owner},
            "metadata": {"ssh-keys": args.ssh_keys},
        }
        for slot in range(slots):
            state.create_node(PROJECT, zone, f"{fleet}-{slot}", body)
    state.advance()  # create_seconds = 0: every node READY now, host starts queued
    await server.start("127.0.0.1", 0)
    hosts = server.worker_hosts
    if isinstance(hosts, SshWorkerHosts):
        nodes = state.all_nodes()
        deadline = time.monotonic() + args.hosts_timeout
        while not all(hosts.running(n) for n in nodes):
            if time.monotonic() > deadline:
                up = sum(1 for n in nodes if hosts.running(n))
                print(json.dumps({"error": f"only {up} of {len(nodes)} hosts up"}), flush=True)
                await server.stop()
                return
            await asyncio.sleep(0.5)
    ready = {n.state for n in state.all_nodes()}
    line = {
        "url": server.url,
        "nodes": len(state.all_nodes()),
        "states": sorted(ready),
        "seed_seconds": round(time.monotonic() - started, 2),
    }
    await _serve(server, line)


async def _serve(server: Any, line: dict[str, Any]) -> None:
    """Say the emulator is ready (`line` on stdout), serve until SIGINT or SIGTERM."""
    print(json.dumps(line), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


class EmulatorProcess:
    """`python -m bench.scale emulator`: seeded, serving, its readiness line read."""

    def __init__(
        self,
        directory: Path,
        nodes: int,
        ssh_keys: str,
        *,
        ssh_port: int | None,
        timeout: float,
        accelerator_type: str = TYPE,
        api: str = "tpu",
        create_quota: int | None = None,
    ) -> None:
        self.log = (directory / "emulator.log").open("ab")
        argv = [
            sys.executable, "-m", "bench.scale", "emulator",
            "--nodes", str(nodes), "--ssh-keys", ssh_keys,
            "--hosts-timeout", str(timeout), "--type", accelerator_type, "--api", api,
        ]  # fmt: skip
        if ssh_port is not None:
            argv += ["--ssh-port", str(ssh_port), "--hosts-dir", str(directory / "hosts")]
        if create_quota is not None:
            argv += ["--create-quota", str(create_quota)]
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT, env=_clean_env()
        )
        assert self.process.stdout is not None
        line = _read_line(self.process.stdout, timeout + 120)
        info = json.loads(line) if line else {"error": "no readiness line (see emulator.log)"}
        if "error" in info:
            if self.process.poll() is not None:
                info["error"] += f" (exit status {self.process.returncode})"
            self.stop()
            raise RuntimeError(f"emulator with {nodes} nodes: {info['error']}")
        self.info: dict[str, Any] = info
        self.url: str = info["url"]

    @property
    def pid(self) -> int:
        return self.process.pid

    def requests(self, since: float) -> list[dict[str, Any]]:
        return get_json(f"{self.url}/_emulator/v1/requests?since={since}")  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.process.poll() is None:
            common.stop_process(self.process, grace=120)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()


def _read_line(stream: IO[bytes], timeout: float) -> str | None:
    """One line from a pipe, or None after `timeout` s or at EOF."""
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        if not sel.select(timeout):
            return None
    line = stream.readline().decode().strip()
    return line or None


def get_json(url: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(url, timeout=120) as response:
        return json.load(response)


def _clean_env(first: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUCARED_")}
    path = [str(first) if first else None, str(ROOT), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
    return env


# ---------------------------------------------------------------------------------------------
# The daemon process


def daemon_config(
    directory: Path,
    endpoint: str,
    size: int,
    *,
    poll: float,
    variant: str,
    ssh_port: int,
    accelerator_type: str = TYPE,
    fleet_keys: dict[str, Any] | None = None,
    policy: Mapping[str, Any] | None = None,
    db: str = "state.db",
) -> Path:
    """`fleet_keys`: laid over each [[fleet]] (a Compute Engine fleet: bench/scale_api.py);
    `policy`: the daemon's [policy] table (the storm's); `db`: its `daemon.db`."""
    compute = (fleet_keys or {}).get("api") == "compute"
    fleets = [
        configs.fleet(
            name,
            zones=[zone],
            accelerator_type=None if compute else accelerator_type,
            runtime_version=None if compute else RUNTIME,
            size=slots,
            capacity="spot",
            workload={"run": WORKLOAD_RUN} if variant == "probe" else None,
            **(fleet_keys or {}),
        )
        for name, zone, slots in fleet_layout(size)
    ]
    config = configs.against_emulator(
        endpoint,
        *fleets,
        project=PROJECT,
        owner=OWNER,
        poll=f"{poll:g}s",
        ssh={"user": SSH_USER, "port": ssh_port},
        daemon={"db": db},
        **({"policy": dict(policy)} if policy else {}),
    )
    return configs.write(directory / "fleet.toml", config)


class DaemonProcess:
    """The real daemon; its JSON log is followed for "reconcile.tick" lines."""

    def __init__(
        self,
        directory: Path,
        config: Path,
        source: Path | None = None,
        *,
        profile: bool = False,
        gc_threshold: int | None = None,
    ) -> None:
        self.directory = directory
        self.db = directory / "state.db"
        self.log_path = directory / "daemon.log"
        self.profile_path = directory / "daemon.prof"
        self._log = self.log_path.open("ab")
        self.started = time.monotonic()
        boot = [_DAEMON_PROFILE_BOOT, str(config), str(self.profile_path)] if profile else [
            _DAEMON_BOOT, str(config)
        ]  # fmt: skip
        if gc_threshold is not None:
            boot[0] = f"import gc; gc.set_threshold({int(gc_threshold)}); " + boot[0]
        self.process = subprocess.Popen(
            [sys.executable, "-c", *boot],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=directory,
            env=_clean_env(source),
        )
        self._reader = self.log_path.open("rb")
        self._partial = b""
        self.ticks: list[dict[str, Any]] = []
        self.launched = 0  # "workload.launched" lines: launches whose SSH is done

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll_log(self) -> list[dict[str, Any]]:
        """New "reconcile.tick" lines since the last call (appended to `self.ticks` too)."""
        data = self._partial + self._reader.read()
        lines = data.split(b"\n")
        self._partial = lines.pop()
        fresh = []
        for raw in lines:
            self.launched += b'"event": "workload.launched"' in raw
            if b'"reconcile.tick"' not in raw:
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(raw)
                if event.get("event") == "reconcile.tick":
                    fresh.append(event)
        self.ticks += fresh
        return fresh

    def alive(self) -> None:
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the daemon exited with {self.process.returncode}:\n{tail}")

    def stop(self) -> int:
        code = common.stop_process(self.process, grace=120)
        self._log.close()
        self._reader.close()
        return code


def count_rows(db: Path, sql: str) -> int:
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    except sqlite3.OperationalError:
        return 0
    try:
        return int(conn.execute(sql).fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # still migrating
    finally:
        conn.close()


def probe_design(root: Path = ROOT) -> str:
    """Which probe scheduling the daemon under test has: "inline" when Reconciler.tick still
    awaits the workload probe, else "background" (per-slot tasks outside the tick)."""
    source = (root / "tpucared" / "runtime" / "reconciler.py").read_text()
    return "inline" if "await self._workloads.probe" in source else "background"


def wait_until(
    check: Callable[[], bool],
    within: float,
    what: str,
    daemon: DaemonProcess | None = None,
    progress: Callable[[], str] | None = None,
) -> None:
    deadline = time.monotonic() + within
    while not check():
        if daemon is not None:
            daemon.alive()
        if time.monotonic() > deadline:
            where = f"; {progress()}" if progress is not None else ""
            raise TimeoutError(
                f"scale benchmark: timed out after {within:.0f}s waiting for {what}{where}"
            )
        time.sleep(0.1)


def log_problems(path: Path, limit: int = 5) -> str:
    """How many warning/error lines a JSON log has, and the last few distinct ones."""
    if not path.exists():
        return f"{path.name}: none"
    problems: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        if '"level": "error"' in line or '"level": "warning"' in line or "Error" in line:
            problems.append(line[:300])
    last = list(dict.fromkeys(reversed(problems)))[:limit]
    return f"{path.name}: {len(problems)} warning/error lines, last: {last}"


def keep_logs(directory: Path, into: Path) -> None:
    """Copy a run's logs and config (not its database, keys or hosts) to `into` (`--keep-logs`)."""
    shutil.copytree(
        directory,
        into / directory.name,
        ignore=shutil.ignore_patterns("*.db*", "hosts", "id_*"),
        dirs_exist_ok=True,
    )
