"""sdnotify.py against real AF_UNIX datagram sockets (a path in tmp_path, an abstract name),
what the ticks make it say, and `tpucared run` as a real process under a fake systemd: READY=1
after a tick, WATCHDOG=1 per tick, STATUS=, STOPPING=1 on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import structlog.testing
from runtime_support import SLOW, Control, Daemon, write_config

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import ErrorKind, FleetSpec
from tpucared.runtime.reconciler import Tick
from tpucared.runtime.sdnotify import Notifier, TickNotifier


def _bound(address: str | bytes) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(address)
    server.settimeout(5)
    return server


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, Path]]:
    path = tmp_path / "notify.sock"
    server = _bound(str(path))
    yield server, path
    server.close()


def test_a_path_socket_gets_each_message_exactly(listener: tuple[socket.socket, Path]) -> None:
    server, path = listener
    notifier = Notifier({"NOTIFY_SOCKET": str(path)})
    assert notifier.enabled
    assert notifier.notify(READY=1, STATUS="tick 1: fine")
    assert notifier.notify(WATCHDOG=1)
    assert notifier.notify(STATUS="two\nlines")
    notifier.close()
    assert server.recv(4096) == b"READY=1\nSTATUS=tick 1: fine"
    assert server.recv(4096) == b"WATCHDOG=1"
    assert server.recv(4096) == b"STATUS=two lines"


def test_an_abstract_socket_is_written_with_an_at_sign() -> None:
    name = f"tpucared-test-{os.getpid()}-{time.monotonic_ns()}"
    server = _bound(b"\0" + name.encode())
    try:
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert notifier.notify(STOPPING=1)
        notifier.close()
        assert server.recv(4096) == b"STOPPING=1"
    finally:
        server.close()


def test_without_notify_socket_it_does_nothing() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert notifier.watchdog_usec is None
    assert notifier.notify(READY=1) is False
    assert notifier._socket is None  # no socket was even made
    assert not Notifier({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled


def test_a_vanished_socket_raises_nothing_and_warns_once(
    listener: tuple[socket.socket, Path],
) -> None:
    server, path = listener
    notifier = Notifier({"NOTIFY_SOCKET": str(path)})
    assert notifier.notify(READY=1)
    server.close()
    path.unlink()
    with structlog.testing.capture_logs() as logs:
        assert notifier.notify(WATCHDOG=1) is False
        assert notifier.notify(WATCHDOG=1) is False
    assert [(e["log_level"], e["event"]) for e in logs] == [("warning", "systemd.notify_failed")]
    notifier.close()
    fresh = Notifier({"NOTIFY_SOCKET": str(path)})
    assert fresh.notify(READY=1) is False
    fresh.close()


def test_watchdog_usec_counts_only_for_this_process() -> None:
    assert Notifier({"WATCHDOG_USEC": "5000000"}).watchdog_usec == 5_000_000
    mine = {"WATCHDOG_USEC": "5000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier(mine).watchdog_usec == 5_000_000
    assert Notifier({"WATCHDOG_USEC": "5000000", "WATCHDOG_PID": "1"}).watchdog_usec is None
    assert Notifier({"WATCHDOG_USEC": "0"}).watchdog_usec is None
    assert Notifier({"WATCHDOG_USEC": "soon"}).watchdog_usec is None


def _tick(number: int, *, zones_ok: tuple[bool, ...], phases: tuple[NodePhase, ...]) -> Tick:
    """The fields TickNotifier reads, and nothing else."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    observations = tuple(
        ZoneObservation(zone=f"z-{i}", observed_at=now, error=None if ok else ErrorKind.TRANSIENT)
        for i, ok in enumerate(zones_ok)
    )
    nodes = {i: SimpleNamespace(fleet="sweep", phase=p) for i, p in enumerate(phases)}
    tick: Any = SimpleNamespace(
        number=number,
        observations=observations,
        snapshot=SimpleNamespace(nodes=nodes),
        seconds=0.3125,
    )
    return cast(Tick, tick)


async def test_ready_waits_for_a_listed_zone_and_each_tick_pings(
    listener: tuple[socket.socket, Path],
) -> None:
    server, path = listener
    notifier = Notifier({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "60000000"})
    fleet = cast(FleetSpec, SimpleNamespace(name="sweep", size=3))
    systemd = TickNotifier(notifier, [fleet])

    await systemd.on_tick(_tick(1, zones_ok=(False,), phases=()))
    await systemd.on_tick(_tick(2, zones_ok=(False, True), phases=(NodePhase.REQUESTED,) * 3))
    ready, creating = NodePhase.READY, NodePhase.CREATING
    await systemd.on_tick(_tick(3, zones_ok=(True, True), phases=(ready, ready, creating)))
    systemd.stopping()
    systemd.stopping()
    await systemd.on_tick(_tick(4, zones_ok=(True, True), phases=(ready,) * 3))
    notifier.close()

    assert server.recv(4096).decode() == (
        "EXTEND_TIMEOUT_USEC=60000000\n"
        "STATUS=tick 1: 0/3 slots ready, 0 creating, 0/1 zones listed, last tick 0.31 s "
        "(not ready: no zone listed yet)\n"
        "WATCHDOG=1"
    )
    assert server.recv(4096).decode() == (
        "READY=1\n"
        "STATUS=tick 2: 0/3 slots ready, 3 creating, 1/2 zones listed, last tick 0.31 s\n"
        "WATCHDOG=1"
    )
    assert server.recv(4096).decode() == (
        "STATUS=tick 3: 2/3 slots ready, 1 creating, 2/2 zones listed, last tick 0.31 s\nWATCHDOG=1"
    )
    assert server.recv(4096) == b"STOPPING=1\nSTATUS=stopping: draining calls in flight"
    server.settimeout(0.2)
    with pytest.raises(TimeoutError):
        server.recv(4096)  # once stopping, neither a second STOPPING=1 nor a ping


@pytest.mark.slow
async def test_tpucared_run_tells_systemd_it_is_ready_alive_and_stopping(
    tmp_path: Path,
    control: Control,
    daemons: Any,
    listener: tuple[socket.socket, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, path = listener
    server.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))  # the daemon's env copies this process's
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    daemon: Daemon = daemons(write_config(tmp_path, control.emulator.url, poll="300ms"))
    await daemon.start()
    loop = asyncio.get_running_loop()

    async def receive(within: float = SLOW) -> dict[str, str]:
        data = await asyncio.wait_for(loop.sock_recv(server, 4096), within)
        return dict(line.split("=", 1) for line in data.decode().splitlines())

    first = await receive()
    assert first["READY"] == "1"
    assert first["WATCHDOG"] == "1"
    assert first["STATUS"].startswith("tick 1: 0/3 slots ready, 0 creating, 1/1 zones listed")
    pings = [await receive(10) for _ in range(3)]
    assert all(p.keys() == {"STATUS", "WATCHDOG"} for p in pings), pings
    numbers = [int(p["STATUS"].split(":")[0].removeprefix("tick ")) for p in pings]
    assert numbers == sorted(numbers), numbers
    assert numbers[0] > 1, numbers

    daemon.signal(signal.SIGTERM)
    messages = []
    while True:
        message = await receive(30)
        messages.append(message)
        if "STOPPING" in message:
            break
    assert messages[-1] == {"STOPPING": "1", "STATUS": "stopping: draining calls in flight"}
    assert await daemon.wait(30) == 0
    with pytest.raises(BlockingIOError):
        server.recv(4096)  # nothing after STOPPING=1
