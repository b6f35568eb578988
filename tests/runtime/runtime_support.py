"""Helpers for the runtime tests: the real daemon as a subprocess, its config, the emulator's
control API, and reads of the daemon's SQLite file with the stdlib (independent of the store).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench import daemon_config
from bench.common import free_port
from bench.daemon_config import OWNER, PROJECT, ZONE
from tpucared_emulator import EmulatorServer

# Bound on waits for things that involve starting a daemon or letting it converge. Generous:
# a Python process importing aiohttp, SQLAlchemy and Alembic on a loaded 2-core machine can
# take many seconds. Only a failing test ever waits this long; timing claims are asserted
# separately and explicitly.
SLOW = 60.0
REPO = Path(__file__).resolve().parents[2]


def write_config(
    directory: Path,
    endpoint: str,
    *,
    size: int = 3,
    fleet: str = "sweep",
    zones: tuple[str, ...] = (ZONE,),
    poll: str = "300ms",
    policy: Mapping[str, object] | None = None,
    timeouts: Mapping[str, str] | None = None,
    extra_fleets: str = "",
    name: str = "fleet.toml",
    http_port: int | None = None,
    provisioning: str = "direct",
    workload: Mapping[str, object] | None = None,
) -> Path:
    """A config for the daemon against the emulator at `endpoint`; db and key in `directory`;
    `extra_fleets` is TOML of more tables (more [[fleet]]); `workload` the fleet's workload
    table."""
    config = daemon_config.against_emulator(
        endpoint,
        daemon_config.fleet(
            fleet,
            zones=list(zones),
            size=size,
            capacity="spot",
            provisioning=provisioning,
            labels={"team": "tests"},
            **({"workload": dict(workload)} if workload is not None else {}),
        ),
        poll=poll,
        daemon={"http": f"127.0.0.1:{http_port}"} if http_port else {},
        policy={"vanish_grace": "1s", **(policy or {}), "timeouts": dict(timeouts or {})},
        more=extra_fleets,
    )
    return daemon_config.write(directory / name, config)


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUCARED_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


async def tpucared(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """`python -m tpucared ARGS` as a person runs it (the test's environment, from the
    repository): (exit code, stdout, stderr), within 60 s."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tpucared", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=cli_env(), cwd=REPO,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin or b""), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@dataclass
class Daemon:
    """One `python -m tpucared run -c CONFIG` process; its output goes to `log_path`."""

    config: Path
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    _log: Any = field(default=None, repr=False)

    async def start(self) -> Daemon:
        self._log = self.log_path.open("ab")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tpucared",
            "--log-level",
            "info",
            "run",
            "-c",
            str(self.config),
            stdout=self._log,
            stderr=asyncio.subprocess.STDOUT,
            env=cli_env(),
            cwd=REPO,
        )
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(sig)

    async def wait(self, within: float) -> int:
        assert self.process is not None
        code = await asyncio.wait_for(self.process.wait(), within)
        self._close_log()
        return code

    async def kill(self) -> None:
        """kill -9, and reap it."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events


class Control:
    """The emulator's control API (/_emulator/v1), over HTTP like any client would."""

    def __init__(self, emulator: EmulatorServer, session: aiohttp.ClientSession) -> None:
        self.base = emulator.url + "/_emulator/v1"
        self.session = session
        self.emulator = emulator

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        async with self.session.request(method, self.base + path, json=body) as response:
            data = await response.json()
            if response.status >= 400:
                raise AssertionError(f"{method} {path}: {response.status} {data}")
            return data

    async def node_action(
        self, node: str, action: str, zone: str = ZONE, project: str = PROJECT
    ) -> Any:
        path = f"/projects/{project}/locations/{zone}/nodes/{node}:{action}"
        return await self._call("POST", path)

    async def nodes(self) -> list[dict[str, Any]]:
        return list((await self._call("GET", "/nodes"))["nodes"])

    async def capacity(self, available: int | None, zone: str = ZONE, kind: str = "v4-8") -> None:
        body = {"zone": zone, "accelerator_type": kind, "available": available}
        await self._call("PUT", "/capacity", body)

    async def faults(self, config: Mapping[str, Any]) -> None:
        await self._call("PUT", "/faults", dict(config))

    async def requests(self, since: float | None = None) -> list[dict[str, Any]]:
        query = f"?since={since}" if since is not None else ""
        return list(await self._call("GET", "/requests" + query))


def short(node: Mapping[str, Any]) -> str:
    return str(node["node_id"])


def labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict(node["node"].get("labels") or {})


def ours(nodes: list[dict[str, Any]], fleet: str = "sweep") -> list[dict[str, Any]]:
    """The control API's nodes that carry both of our labels for `fleet`."""
    return [
        n
        for n in nodes
        if labels(n).get("tpucared-owner") == OWNER and labels(n).get("tpucared-fleet") == fleet
    ]


def query(db: Path, sql: str, *args: Any) -> list[sqlite3.Row]:
    """Rows from the daemon's database, read with the stdlib while the daemon may run."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []  # the daemon is still migrating the new database
        raise
    finally:
        conn.close()


def live_nodes(db: Path, fleet: str = "sweep") -> dict[int, sqlite3.Row]:
    rows = query(
        db,
        "SELECT * FROM nodes WHERE fleet = ? AND phase IN "
        "('requested','creating','ready','dead','deleting')",
        fleet,
    )
    return {r["slot"]: r for r in rows}


async def wait_for(
    check: Callable[[], Awaitable[Any]], within: float, what: str, every: float = 0.1
) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `within` s."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(every)


async def converged(control: Control, db: Path, size: int, fleet: str = "sweep") -> bool:
    """Exactly `size` READY nodes of ours, each the live READY incarnation of its slot, and
    nothing else of ours in the cloud."""
    mine = ours(await control.nodes(), fleet)
    if len(mine) != size or any(n["state"] != "READY" for n in mine):
        return False
    live = live_nodes(db, fleet)
    if sorted(live) != list(range(size)):
        return False
    for node in mine:
        slot = int(short(node).rsplit("-", 1)[1])
        row = live.get(slot)
        if row is None or row["phase"] != "ready" or row["node_name"] != short(node):
            return False
        if row["cloud_id"] != node["node"]["id"]:
            return False
    return True


def hosts_emulator_options(base: Mapping[str, Any], tmp_path: Path, **more: Any) -> dict[str, Any]:
    """A fast emulator whose workers are SSH hosts (for the workload's end-to-end tests)."""
    return {
        **base,
        "create_seconds": 0.2,
        "delete_seconds": 0.1,
        "ssh_hosts": True,
        "ssh_port": free_port(),
        "hosts_dir": str(tmp_path / "hosts"),
        **more,
    }


def workload_config(
    tmp_path: Path,
    emulator: EmulatorServer,
    *,
    fleet: str,
    accelerator_type: str,
    run: str,
    results: Path,
    poll: str = "300ms",
    ssh: str = "",
    workload: str = "",
    tables: str = "",
    fleet_lines: str = "",
) -> Path:
    """One slot of `fleet` with a workload `run` (RESULTS=`results` in its environment) against
    `emulator`'s SSH hosts; `ssh`, `fleet_lines` and `workload` are more lines of those tables,
    `tables` more tables (e.g. a `[policy]`)."""
    lines = daemon_config.parse(fleet_lines)
    config = daemon_config.against_emulator(
        emulator.url,
        daemon_config.fleet(
            fleet,
            accelerator_type=accelerator_type,
            **({"capacity": "spot"} | lines),
            workload={
                "run": run,
                "env": {"RESULTS": str(results)},
                **daemon_config.parse(workload),
            },
        ),
        poll=poll,
        ssh={"port": emulator.options.ssh_port, **daemon_config.parse(ssh)},
        more=tables,
    )
    return daemon_config.write(tmp_path / "fleet.toml", config)


@dataclass
class Rig:
    """What an end-to-end workload test stands on (the `rig` fixture): the emulator, its control
    API, the test's daemons, and where the workload writes (`results`) and the daemon its state."""

    emulator: EmulatorServer
    control: Control
    daemons: Callable[[Path], Daemon]
    tmp_path: Path

    @property
    def results(self) -> Path:
        return self.tmp_path / "results"

    @property
    def db(self) -> Path:
        return self.tmp_path / "state.db"

    def config(self, **fleet: Any) -> Path:
        """`workload_config` of `fleet`'s keywords, with RESULTS (created) = `self.results`."""
        self.results.mkdir(exist_ok=True)
        return workload_config(self.tmp_path, self.emulator, results=self.results, **fleet)

    async def start(self, **fleet: Any) -> Daemon:
        """A daemon started on `self.config(**fleet)`."""
        return await self.daemons(self.config(**fleet)).start()


# ---------------------------------------------------------------------------------------------
# Compute Engine fleets (`api = "compute"`): one instance per slot.

MACHINE = "tpu7x-standard-4t"


def compute_fleet(name: str, size: int, on_preemption: str = "stop") -> dict[str, Any]:
    """A [[fleet]] table of spot TPU7x VMs in ZONE (no accelerator_type / runtime_version)."""
    return daemon_config.fleet(
        name, size=size, capacity="spot", accelerator_type=None, runtime_version=None,
        api="compute", machine_type=MACHINE, on_preemption=on_preemption,
    )  # fmt: skip


async def compute_instances(control: Control, fleet: str) -> list[dict[str, Any]]:
    """`fleet`'s instances of ours, whatever their status (the control API's internal view)."""
    async with control.session.get(control.base + "/instances") as response:
        found = (await response.json())["instances"]
    labels = {"tpucared-owner": OWNER, "tpucared-fleet": fleet}
    return [i for i in found if labels.items() <= (i["instance"].get("labels") or {}).items()]


async def compute_converged(control: Control, db: Path, size: int, fleet: str) -> bool:
    """Exactly `size` RUNNING instances of ours in `fleet` (none TERMINATED, none twice),
    each the live READY incarnation of its slot, by name and instance id."""
    mine = await compute_instances(control, fleet)
    if len(mine) != size or any(i["status"] != "RUNNING" for i in mine):
        return False
    live = live_nodes(db, fleet)
    if sorted(live) != list(range(size)):
        return False
    for inst in mine:
        row = live.get(int(inst["name"].rsplit("-", 1)[1]))
        if row is None or row["phase"] != "ready" or row["node_name"] != inst["name"]:
            return False
        if row["cloud_id"] != inst["instance"]["id"]:
            return False
    return True
