"""The Launcher port is a seam: a second, minimal implementation of it, here in the test, runs a
slot's workload as local subprocesses (no SSH at all), and the real daemon (`run_daemon`,
against the emulator) drives it as it drives the SSH launcher: the node comes up, the attempt
is launched with the contract's environment, the node is preempted through the emulator's
control API, and the daemon relaunches the next attempt on the new node through the same
launcher."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from runtime_support import Control, query, wait_for, write_config

from tpucared.config import load_config
from tpucared.core.model.records import IncarnationRecord, WorkerRecord
from tpucared.launch import workload_environment
from tpucared.ports.launcher import (
    CleanupResult,
    CleanupState,
    HealthCheck,
    Launch,
    Launcher,
    LaunchResult,
    LaunchState,
    NoticeResult,
    NoticeState,
    NoticeWait,
    Place,
    ProbeResult,
    Reply,
    Run,
    RunState,
    WorkerFile,
    WorkerLost,
)
from tpucared.runtime.daemon import run_daemon

pytestmark = pytest.mark.timeout(90)

FLEET = "sweep"
RUN = 'echo "$TPUCARED_ATTEMPT $TPUCARED_NODE" >> "$HOME/attempts"; exec sleep 300'


@dataclass
class _Process:
    popen: subprocess.Popen[bytes]
    env: dict[str, str]


class LocalLauncher:
    """The Launcher port over local subprocesses: a worker is a directory (its home), a run a
    process group started in it. A node's processes die with its incarnation (`forget`), as a
    preempted VM's do."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.on_lost: Callable[[WorkerLost], None] | None = None
        self.runs: dict[tuple[int, int, str, int], _Process] = {}  # (inc, worker, run, attempt)

    def home(self, inc: IncarnationRecord, worker: int) -> Path:
        path = self.root / f"{inc.node_name}-{inc.id}" / f"worker-{worker}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _run(self, place: Place, worker: int, run: Run) -> _Process | None:
        return self.runs.get((place.inc.id, worker, run.run_id, run.attempt or 0))

    async def locate(self, inc: IncarnationRecord, workers: Sequence[WorkerRecord]) -> Place | str:
        return Place(inc, len(workers))

    async def probe(
        self, runs: Sequence[tuple[Place, Run]], *, patient: bool = False, quiet: bool = False,
        only: bool = False,
    ) -> list[list[Reply[ProbeResult]]]:  # fmt: skip
        return [[self._probe(place, w, run) for w in range(place.size)] for place, run in runs]

    def _probe(self, place: Place, worker: int, run: Run) -> Reply[ProbeResult]:
        found = self._run(place, worker, run)
        if found is None:
            return Reply(worker, ProbeResult(RunState.GONE, reason="no-run"))
        code = found.popen.poll()
        if code is None:
            return Reply(worker, ProbeResult(RunState.RUNNING, pid=found.popen.pid, log_bytes=0))
        return Reply(worker, ProbeResult(RunState.EXITED, exit_code=code, log_bytes=0))

    async def install(
        self, place: Place, run_id: str, files: Sequence[WorkerFile], secrets: Mapping[str, str]
    ) -> dict[int, str]:
        return {}

    async def launch(self, place: Place, launch: Launch) -> list[Reply[LaunchResult]]:
        return [self._launch(place, w, launch) for w in range(place.size)]

    def _launch(self, place: Place, worker: int, launch: Launch) -> Reply[LaunchResult]:
        run = launch.run
        assert run.attempt is not None
        found = self._run(place, worker, run)
        if found is not None:  # once per run, as the SSH launcher's run directory
            return Reply(worker, LaunchResult(LaunchState.RUNNING, pid=found.popen.pid))
        env = workload_environment(
            fleet=launch.fleet, slot=launch.slot, node=place.inc.node_name, worker=worker,
            num_workers=place.size, run_id=run.run_id, attempt=run.attempt,
            preemptions=launch.preemptions, failures=launch.failures, env=launch.spec.env,
            slice_of=launch.slice_of,
        )  # fmt: skip
        home = self.home(place.inc, worker)
        popen = subprocess.Popen(
            ["sh", "-c", launch.spec.run],
            cwd=home,
            env={"PATH": os.environ["PATH"], "HOME": str(home), **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.runs[(place.inc.id, worker, run.run_id, run.attempt)] = _Process(popen, env)
        return Reply(worker, LaunchResult(LaunchState.STARTED, pid=popen.pid))

    async def cleanup(
        self, place: Place, run: Run | None, health: HealthCheck | None = None
    ) -> list[Reply[CleanupResult]]:
        replies = []
        for w in range(place.size):
            found = self._run(place, w, run) if run is not None else None
            group = "none" if found is None or not _kill(found) else "killed"
            replies.append(Reply(w, CleanupResult(CleanupState.CLEAN, group, 0, "absent")))
        return replies

    async def wait_notice(
        self, place: Place, run: Run, what: NoticeWait, seconds: float
    ) -> NoticeResult | str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline:  # no notices here: only the run's end
            found = self._run(place, 0, run)
            if found is None or found.popen.poll() is not None:
                return NoticeResult(NoticeState.ENDED if what == "notice" else NoticeState.STOPPED)
            await asyncio.sleep(0.1)
        return NoticeResult(NoticeState.TIMEOUT)

    async def signal(self, place: Place, run: Run, signal: str) -> int:
        return 0

    async def forget(self, live: set[int]) -> None:
        for key, found in self.runs.items():
            if key[0] not in live:
                _kill(found)

    async def close(self) -> None:
        for found in self.runs.values():
            _kill(found)


async def _until(check: Callable[[], bool], what: str, within: float) -> None:
    async def checked() -> bool:
        return check()

    await wait_for(checked, within, what)


def _kill(found: _Process) -> bool:
    """Kill the run's process group; True if it was still running."""
    if found.popen.poll() is not None:
        return False
    os.killpg(found.popen.pid, signal.SIGKILL)
    found.popen.wait()
    return True


def test_the_local_launcher_satisfies_the_port() -> None:
    launcher: Launcher = LocalLauncher(Path("unused"))  # `mypy --strict` of this file checks it
    assert launcher.on_lost is None


async def test_the_real_daemon_runs_a_slot_through_another_launcher(
    tmp_path: Path, control: Control
) -> None:
    config = load_config(
        write_config(tmp_path, control.emulator.url, size=1, workload={"run": RUN})
    )
    launcher = LocalLauncher(tmp_path / "workers")
    stop = asyncio.Event()
    daemon = asyncio.create_task(
        run_daemon(config, stop=stop, serve_http=False, handle_signals=False, launcher=launcher)
    )
    db = tmp_path / "state.db"

    def launched() -> list[dict[str, str]]:
        return [p.env for p in launcher.runs.values()]

    def homes() -> list[Path]:
        return sorted(launcher.root.glob("*/worker-0/attempts"), key=lambda p: p.stat().st_mtime)

    def attempts() -> list[tuple[int, str | None]]:
        rows = query(db, "SELECT number, outcome FROM workload_attempts ORDER BY number")
        return [(r["number"], r["outcome"]) for r in rows]

    try:
        await _until(lambda: len(launched()) == 1, "attempt 1 launched", 30)
        (first,) = launched()
        assert first["TPUCARED_ATTEMPT"] == "1"
        assert (first["TPUCARED_FLEET"], first["TPUCARED_SLOT"]) == (FLEET, "0")
        assert (first["TPUCARED_NODE"], first["TPUCARED_WORKER"]) == (f"{FLEET}-0", "0")
        assert first["TPUCARED_NUM_WORKERS"] == "1"
        assert first["TPUCARED_PREEMPTIONS"] == "0"
        await _until(lambda: len(homes()) == 1, "attempt 1 ran locally", 10)
        assert homes()[0].read_text() == f"1 {FLEET}-0\n"

        await control.node_action(f"{FLEET}-0", "preempt")
        await _until(lambda: len(launched()) == 2, "attempt 2 launched on the new node", 30)
        second = launched()[1]
        assert second["TPUCARED_ATTEMPT"] == "2"
        assert second["TPUCARED_PREEMPTIONS"] == "1"
        assert second["TPUCARED_RUN_ID"] == first["TPUCARED_RUN_ID"]
        await _until(lambda: len(homes()) == 2, "attempt 2 ran locally", 10)
        assert homes()[1].read_text() == f"2 {FLEET}-0\n"  # a new incarnation, a new home
        assert attempts() == [(1, "preempted"), (2, None)]
        old, new = (p.popen for p in launcher.runs.values())
        assert old.poll() is not None  # the preempted node's run died with it
        assert new.poll() is None
    finally:
        stop.set()
        assert await asyncio.wait_for(daemon, 30) == 0
        await launcher.close()
