"""`tpucared babysit`: the one-fleet config it builds from its arguments, the exit status it
derives from the last attempt, and the real command against the emulator's SSH workers: a
command that exits 0 ends with 0 and no node left; one that keeps failing ends with its own
exit code once its retries are spent."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bench.common import free_port
from tpucared.core.model.records import AttemptOutcome, WorkloadAttemptRecord
from tpucared.core.model.specs import CapacityKind, OnSuccess, RestartPolicy
from tpucared.demo.babysit import (
    OWNER,
    BabysitError,
    babysit_config,
    build_parser,
    exit_status,
    split_command,
)
from tpucared_emulator import EmulatorServer

TPUCARED = [sys.executable, "-m", "tpucared"]
ZONE = "us-central2-b"
BABYSIT_TIMEOUT_S = 120.0


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["job", "--zone", ZONE, "--type", "v4-8", *argv])


# -- arguments -> config -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "own", "command"),
    [
        (["job", "--", "python3 train.py --lr 3"], ["job"], "python3 train.py --lr 3"),
        (
            ["job", "--", "python3", "-c", "print('a b')"],
            ["job"],
            "python3 -c 'print('\"'\"'a b'\"'\"')'",
        ),
        (["job", "--retries", "2", "--", "--keep"], ["job", "--retries", "2"], "--keep"),
        (["job", "--zone", "z"], ["job", "--zone", "z"], None),
        (["job", "--"], ["job"], None),
    ],
)
def test_cmd_is_everything_after_the_first_double_dash(
    argv: list[str], own: list[str], command: str | None
) -> None:
    assert split_command(argv) == (own, command)


def test_the_config_is_one_slot_running_the_command(tmp_path: Path) -> None:
    setup = tmp_path / "setup.sh"
    setup.write_text("pip install -r requirements.txt\n")
    args = _args(
        "--spot", "--setup", str(setup), "--retries", "2", "--project", "my-project",
        "--db", str(tmp_path / "b.db"),
    )  # fmt: skip
    config = babysit_config(args, "python3 train.py")
    (fleet,) = config.fleets
    assert (fleet.name, fleet.size, fleet.zones) == ("job", 1, (ZONE,))
    assert (fleet.accelerator_type, fleet.capacity) == ("v4-8", CapacityKind.SPOT)
    assert fleet.workload is not None
    assert fleet.workload.run == "python3 train.py"
    assert fleet.workload.setup == "pip install -r requirements.txt\n"
    assert fleet.workload.restart is RestartPolicy.ON_FAILURE
    assert fleet.workload.max_failures == 2
    assert fleet.workload.on_success is OnSuccess.DELETE
    assert config.daemon.owner == OWNER
    assert config.daemon.db == str(tmp_path / "b.db")
    assert config.ssh.key == tmp_path / "id_ed25519"
    assert config.gcp.endpoint == "https://tpu.googleapis.com"
    assert config.daemon.poll_interval == 10.0


def test_keep_keeps_the_node_and_an_emulator_is_polled_fast(tmp_path: Path) -> None:
    args = _args("--keep", "--preemptible", "--project", "my-project", "--credentials", "none",
                 "--endpoint", "http://127.0.0.1:1", "--db", str(tmp_path / "b.db"))  # fmt: skip
    config = babysit_config(args, "true")
    (fleet,) = config.fleets
    assert fleet.capacity is CapacityKind.PREEMPTIBLE
    assert fleet.workload is not None
    assert fleet.workload.on_success is OnSuccess.KEEP
    assert config.daemon.poll_interval == 1.0


def test_without_a_capacity_flag_it_is_on_demand(tmp_path: Path) -> None:
    config = babysit_config(_args("--project", "my-project", "--db", str(tmp_path / "b.db")), "x")
    assert config.fleets[0].capacity is CapacityKind.ON_DEMAND


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--project", "my-project", "--setup", "/nonexistent/setup.sh"], "--setup /nonexistent"),
        (["--project", "my-project", "--retries", "-1"], "max_failures: expected a number >= 0"),
        (["--project", "Not A Project"], "gcp.project"),
    ],
)
def test_mistakes_are_one_line_naming_what_is_wrong(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    with pytest.raises(BabysitError, match=message.replace("(", r"\(")):
        babysit_config(_args(*argv, "--db", str(tmp_path / "b.db")), "true")


def test_a_project_is_required(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _args("--db", str(tmp_path / "b.db"))
    args.project = None
    with pytest.raises(BabysitError, match="--project is required"):
        babysit_config(args, "true")


def _attempt(outcome: AttemptOutcome, codes: dict[int, int | None]) -> WorkloadAttemptRecord:
    at = datetime(2025, 6, 1, tzinfo=UTC)
    return WorkloadAttemptRecord(1, "job", 0, 1, 2, at, at, outcome, codes)


@pytest.mark.parametrize(
    ("outcome", "codes", "status"),
    [
        (AttemptOutcome.SUCCEEDED, {0: 0, 1: 0}, 0),
        (AttemptOutcome.FAILED, {0: 3, 1: 3}, 3),
        (AttemptOutcome.FAILED, {0: 0, 1: 7, 2: 9}, 7),  # worker 0 first, else the lowest
        (AttemptOutcome.FAILED, {0: 5, 1: 7}, 5),
        (AttemptOutcome.FAILED, {0: None, 1: None}, 1),  # killed: no code to pass on
        (AttemptOutcome.HUNG, {}, 1),
    ],
)
def test_the_exit_status_is_the_workloads(
    outcome: AttemptOutcome, codes: dict[int, int | None], status: int
) -> None:
    assert exit_status(_attempt(outcome, codes)) == status


def test_the_cli_wants_a_command_and_explains_itself() -> None:
    missing = subprocess.run([*TPUCARED, "babysit", "job", "--zone", ZONE, "--type", "v4-8"],
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert missing.returncode == 2
    assert "missing `-- CMD`" in missing.stderr
    helped = subprocess.run([*TPUCARED, "babysit", "--help"], capture_output=True, text=True,
                            check=False)  # fmt: skip
    assert helped.returncode == 0
    assert "tpucared babysit NAME --zone Z --type T [options] -- CMD" in helped.stdout
    assert "--retries N" in helped.stdout


# -- against the emulator ------------------------------------------------------------------------


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    return {**emulator_options, "ssh_hosts": True, "ssh_port": free_port("0.0.0.0")}


async def _babysit(
    emulator: EmulatorServer, tmp_path: Path, name: str, *argv: str
) -> tuple[int, str]:
    port = emulator.options.ssh_port
    proc = await asyncio.create_subprocess_exec(
        *TPUCARED, "babysit", name, "--zone", ZONE, "--type", "v4-16",
        "--project", "test-project", "--endpoint", emulator.url, "--credentials", "none",
        "--db", str(tmp_path / f"{name}.db"), "--ssh-port", str(port),
        "--poll-interval", "300ms", *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), BABYSIT_TIMEOUT_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def _nodes(emulator: EmulatorServer) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(emulator.url + "/_emulator/v1/nodes") as response,
    ):
        return list(json.loads(await response.text())["nodes"])


@pytest.mark.slow
async def test_a_command_that_exits_0_ends_with_0_and_its_node_deleted(
    emulator: EmulatorServer, tmp_path: Path
) -> None:
    command = "echo hello from $TPUCARED_NODE, attempt $TPUCARED_ATTEMPT; sleep 2"
    code, out = await _babysit(emulator, tmp_path, "ok", "--", command)
    assert code == 0, out
    assert "hello from ok-0, attempt 1" in out  # its output, followed from worker 0
    assert "attempt.succeeded" in out
    assert "ok: attempt 1 succeeded" in out
    assert await _nodes(emulator) == []


@pytest.mark.slow
async def test_a_command_that_keeps_failing_ends_with_its_exit_code(
    emulator: EmulatorServer, tmp_path: Path
) -> None:
    code, out = await _babysit(emulator, tmp_path, "bad", "--retries", "1", "--", "exit 3")
    assert code == 3, out
    assert "bad: attempt 2 failed" in out  # one retry, then it gave up
    assert await _nodes(emulator) == []


@pytest.mark.slow
async def test_keep_leaves_the_node_when_the_command_is_done(
    emulator: EmulatorServer, tmp_path: Path
) -> None:
    code, out = await _babysit(emulator, tmp_path, "kept", "--keep", "--", "true")
    assert code == 0, out
    assert [(n["node_id"], n["state"]) for n in await _nodes(emulator)] == [("kept-0", "READY")]


@pytest.mark.slow
async def test_ctrl_c_deletes_the_node_and_exits_130(
    emulator: EmulatorServer, tmp_path: Path
) -> None:
    proc = await asyncio.create_subprocess_exec(
        *TPUCARED, "babysit", "stop", "--zone", ZONE, "--type", "v4-8",
        "--project", "test-project", "--endpoint", emulator.url, "--credentials", "none",
        "--db", str(tmp_path / "stop.db"), "--ssh-port", str(emulator.options.ssh_port),
        "--poll-interval", "300ms", "--", "echo started; sleep 600",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    seen = b""
    try:
        async with asyncio.timeout(BABYSIT_TIMEOUT_S):
            while b"started\n" not in seen:  # the command runs
                line = await proc.stdout.readline()
                assert line, seen.decode()
                seen += line
            proc.send_signal(signal.SIGINT)
            rest, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = (seen + rest).decode()
    assert proc.returncode == 130, out
    assert "interrupted: deleting stop's node" in out
    assert await _nodes(emulator) == []


def test_messages_speak_of_flags_not_config_keys() -> None:
    from tpucared.demo.babysit import _FlagView

    out = io.StringIO()
    view = _FlagView(out)
    view.say(
        "x/0: gave up (3 failures); the slot is done and keeps no node unless on_success = keep."
    )
    view.say("deleting x-0: workload finished (on_success = delete)")
    assert "on_success" not in out.getvalue()
    assert "unless --keep." in out.getvalue()
    assert "(no --keep)" in out.getvalue()
