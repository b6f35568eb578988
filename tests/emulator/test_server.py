"""EmulatorServer's lifecycle and the `tpucared emulator` entry point (a real process)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import requests

from tpucared_emulator import EmulatorOptions, EmulatorServer, EmulatorThread

NODES = "/v2/projects/cli/locations/us-central1-a/nodes"
SPEC = {"acceleratorType": "v2-8", "runtimeVersion": "tpu-vm-base"}


async def test_server_lifecycle() -> None:
    server = EmulatorServer(EmulatorOptions(create_seconds=0.05))
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.url
    async with server:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server.url)
        assert server.port > 0
        with pytest.raises(RuntimeError, match="already started"):
            await server.start()
        async with (
            aiohttp.ClientSession() as session,
            session.get(server.url + NODES) as response,
        ):
            assert response.status == 200
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.url


async def _start_cli(*args: str) -> tuple[asyncio.subprocess.Process, str]:
    code = "import sys; from tpucared_emulator.server import main; sys.exit(main(sys.argv[1:]))"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-u", "-c", code, "--port", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    output = b""
    while not (match := re.search(rb"http://127\.0\.0\.1:\d+", output)):
        line = await asyncio.wait_for(process.stdout.readline(), timeout=20)
        assert line, f"emulator exited early: {output.decode()}"
        output += line
    return process, match.group().decode()


async def _stop_cli(process: asyncio.subprocess.Process) -> int:
    process.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(process.wait(), timeout=20)


@pytest.mark.slow
async def test_cli_serves_until_sigterm_and_keeps_state_across_restarts(tmp_path: Path) -> None:
    state_file = tmp_path / "emulator.json"
    process, url = await _start_cli("--create-seconds", "0.05", "--state-file", str(state_file))
    async with aiohttp.ClientSession() as session:
        async with session.post(url + NODES, params={"nodeId": "kept"}, json=SPEC) as response:
            assert response.status == 200
        await asyncio.sleep(0.1)
        async with session.get(f"{url}{NODES}/kept") as response:
            before = await response.json()
    assert before["state"] == "READY"
    assert await _stop_cli(process) == 0
    saved = json.loads(state_file.read_text())
    assert [n["node_id"] for n in saved["nodes"]] == ["kept"]

    process, url = await _start_cli("--state-file", str(state_file))
    async with aiohttp.ClientSession() as session, session.get(f"{url}{NODES}/kept") as response:
        after = await response.json()
    assert await _stop_cli(process) == 0
    assert after == before  # same id, createTime, addresses


def test_emulator_thread_serves_synchronous_callers(emulator_thread: EmulatorThread) -> None:
    url = f"{emulator_thread.url}{NODES}"
    created = requests.post(url, params={"nodeId": "sync"}, json=SPEC, timeout=10)
    assert created.status_code == 200
    listed = requests.get(url, timeout=10).json()
    assert [n["name"].rsplit("/", 1)[1] for n in listed["nodes"]] == ["sync"]
    # The state lives on the emulator's loop: touch it only through call().
    assert emulator_thread.call(lambda state: [n.state for n in state.all_nodes()]) == ["CREATING"]
