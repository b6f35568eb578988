"""run.sh's notice watchers and notice_wait.sh against a metadata server whose
`instance/maintenance-event` the test sets to each value Google documents: NONE, then
MIGRATE_ON_HOST_MAINTENANCE (a live migration: the VM keeps running, no notice), then
TERMINATE_ON_HOST_MAINTENANCE (the notice: stop signal, `notice`, `notice_kind` maintenance).

The emulator's worker hosts never live-migrate (TPU VMs cannot), so the server here is a small
real one on loopback, speaking the metadata protocol the scripts use (Metadata-Flavor header,
`wait_for_change` held until the value's ETag differs from `last_etag`, `timeout_sec`), as
compute/docs/metadata/getting-live-migration-notice and emulator/tpucared_emulator/hosts/metadata.py
describe it. The scripts run through a local `sh`, as a worker runs them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from aiohttp import web

from tpucared.launch import (
    NoticeState,
    launch_script,
    notice_wait_script,
    parse_launch,
    parse_notice_wait,
)

WORKLOAD = "trap 'echo TERM > OUT/term; exit 0' TERM; while :; do sleep 0.1; done"


class MetadataServer:
    """`instance/preempted` and `instance/maintenance-event`, each a value the test sets; a key
    set to None answers 404 (a metadata server without it)."""

    def __init__(self) -> None:
        self.values: dict[str, str | None] = {"preempted": "FALSE", "maintenance-event": "NONE"}
        self.held: collections.Counter[str] = collections.Counter()  # requests that waited
        self._changed = asyncio.Event()

    def set(self, key: str, value: str | None) -> None:
        self.values[key] = value
        self._changed.set()
        self._changed = asyncio.Event()

    @staticmethod
    def etag(value: str) -> str:
        return hashlib.sha256(value.encode()).hexdigest()[:16]

    async def handle(self, request: web.Request) -> web.Response:
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403)
        key = request.match_info["key"]
        value = self.values.get(key)
        if value is None:
            return web.Response(status=404)
        if request.query.get("wait_for_change") == "true":
            since = request.query.get("last_etag", self.etag(value))
            timeout = float(request.query.get("timeout_sec", "3600"))
            if self.etag(value) == since:
                self.held[key] += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    while (value := self.values.get(key)) is not None and self.etag(value) == since:
                        await self._changed.wait()
            if value is None:
                return web.Response(status=404)
        headers = {"ETag": self.etag(value), "Metadata-Flavor": "Google"}
        return web.Response(text=value, headers=headers)


@contextlib.asynccontextmanager
async def serving(server: MetadataServer) -> AsyncIterator[dict[str, str]]:
    """Runs `server` on loopback; yields the environment that points the scripts at it."""
    app = web.Application()
    app.router.add_get("/computeMetadata/v1/instance/{key}", server.handle)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield {**os.environ, "GCE_METADATA_HOST": f"127.0.0.1:{port}"}
    finally:
        await runner.cleanup()


async def sh(script: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        "sh", "-c", script, env=env, stdout=asyncio.subprocess.PIPE
    )


async def until(check: Callable[[], object], what: str, seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def launched(run_dir: Path, env: dict[str, str]) -> AsyncIterator[None]:
    """The workload started detached in `run_dir` (launch.sh, run.sh and its watchers); its
    process group is ended afterwards, whatever the test did."""
    out = run_dir.parent
    process = await sh(launch_script(str(run_dir), WORKLOAD.replace("OUT", str(out)), {}), env)
    stdout, _ = await process.communicate()
    assert parse_launch(stdout.decode()).pid is not None, stdout
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int((run_dir / "pid").read_text()), signal.SIGKILL)


async def test_only_terminate_on_host_maintenance_is_a_notice(tmp_path: Path) -> None:
    server = MetadataServer()
    run_dir = tmp_path / "run"
    async with serving(server) as env, launched(run_dir, env):
        # Both watchers hold their key from the run's start (Google warns only a VM that asks).
        await until(lambda: server.held["maintenance-event"] and server.held["preempted"], "held")
        wait = await sh(notice_wait_script(str(run_dir), "notice", 30), env)
        await until(lambda: server.held["maintenance-event"] >= 2, "notice_wait holds it too")
        for value in ("MIGRATE_ON_HOST_MAINTENANCE", "NONE"):
            held = server.held["maintenance-event"]
            server.set("maintenance-event", value)
            # Both read it and hold again: a live migration is no notice.
            await until(lambda h=held: server.held["maintenance-event"] >= h + 2, value)
        assert not (run_dir / "notice").exists()
        assert not (tmp_path / "term").exists()
        assert wait.returncode is None  # still waiting

        server.set("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        stdout, _ = await asyncio.wait_for(wait.communicate(), 10)
        answer = parse_notice_wait(stdout.decode())
        assert (answer.state, answer.at is not None) == (NoticeState.NOTICED, True)
        assert "kind=maintenance" in stdout.decode()
        await until(lambda: (tmp_path / "term").exists(), "the workload got SIGTERM")
        assert (run_dir / "notice_kind").read_text() == "maintenance\n"
        assert float((run_dir / "notice").read_text()) == answer.at
        await until(lambda: (run_dir / "exit_code").exists(), "the run recorded its exit")
        assert (run_dir / "exit_code").read_text() == "0\n"
        # The preemption watcher was stopped with the run: it never writes a second notice.
        server.set("preempted", "TRUE")
        await asyncio.sleep(0.3)
        assert (run_dir / "notice_kind").read_text() == "maintenance\n"
        assert not list(run_dir.glob(".notice_wait.*"))  # notice_wait left nothing behind


async def test_without_maintenance_event_the_preemption_notice_still_comes(
    tmp_path: Path,
) -> None:
    """A metadata server that does not serve `maintenance-event`: notice_wait.sh goes on
    holding `instance/preempted`, and run.sh's preemption watcher still fires."""
    server = MetadataServer()
    server.set("maintenance-event", None)
    run_dir = tmp_path / "run"
    async with serving(server) as env, launched(run_dir, env):
        await until(lambda: server.held["preempted"] >= 1, "run.sh holds preempted")
        wait = await sh(notice_wait_script(str(run_dir), "notice", 30), env)
        await until(lambda: server.held["preempted"] >= 2, "notice_wait holds preempted")
        server.set("preempted", "TRUE")
        stdout, _ = await asyncio.wait_for(wait.communicate(), 10)
        assert parse_notice_wait(stdout.decode()).state is NoticeState.NOTICED
        assert "kind=preempted" in stdout.decode()
        assert (run_dir / "notice_kind").read_text() == "preempted\n"
        await until(lambda: (tmp_path / "term").exists(), "the workload got SIGTERM")
