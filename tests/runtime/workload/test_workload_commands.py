"""`tpucared logs / exec / cp` against a running v4-32 slice of the emulator (real SSH).

The slice is brought up by the daemon's tick (workload_harness.py), which pins the
workers' host keys; the commands then read the database's snapshot, as the CLI does.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from workload_harness import (
    FLEET,
    OWNER,
    Harness,
    Make,
    eventually,
    harnesses,
    ssh_config,
    ssh_emulator,
    workload,
)

from bench import daemon_config
from tpucared.config import Config, DaemonConfig, GcpConfig
from tpucared.core.vocab.policy import Policy
from tpucared.core.workload.actions import LaunchWorkload
from tpucared.runtime.workload.by_hand import (
    CommandError,
    Where,
    Workers,
    copy,
    exec_command,
    logs,
    parse_remote,
    parse_where,
    parse_workers,
)
from tpucared.store import Snapshot
from tpucared_emulator import EmulatorServer

pytestmark = pytest.mark.timeout(60)

# Prints a line per second of "tick" files the test drops, so `logs --follow` has news.
RUN = (
    'echo "worker $TPUCARED_WORKER starts"\n'
    "n=0\n"
    "while true; do\n"
    '  if [ -e "$HOME/tick-$n" ]; then echo "tick $n"; n=$((n + 1)); fi\n'
    "  sleep 0.05\n"
    "done\n"
)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**emulator_options, **ssh_emulator(tmp_path)}


@pytest.fixture
async def running(emulator: EmulatorServer, tmp_path: Path) -> AsyncIterator[Harness]:
    """A slice whose workload runs on every worker."""
    make: Make
    async with harnesses(emulator, tmp_path) as make:
        h = await make(workload(RUN))
        await h.create_node()
        await h.tick_until(lambda p: bool(p.of(LaunchWorkload)), "the launch")
        run_id = (await h.slot()).run_id
        await eventually(
            lambda: all((h.run_dir(i, run_id, 1) / "pid").exists() for i in range(4)), "runs"
        )
        yield h


def config_for(h: Harness, tmp_path: Path) -> Config:
    key_path = tmp_path / "id_ed25519"
    h.key.write_private_key(key_path)
    key_path.chmod(0o600)
    return Config(
        path=tmp_path / "fleet.toml",
        daemon=DaemonConfig(
            db=str(tmp_path / "state.db"),
            poll_interval=1.0,
            http_host="127.0.0.1",
            http_port=0,
            owner=OWNER,
        ),
        gcp=GcpConfig(project="p", endpoint=h.emulator.url, credentials="none"),
        ssh=ssh_config(h.hosts.port, key_path),
        fleets=tuple(h.specs),
        policy=Policy(),
    )


async def snapshot_of(h: Harness) -> Snapshot:
    return await h.store.load_snapshot()


async def test_exec_runs_on_the_selected_workers_with_prefixed_output(
    running: Harness, tmp_path: Path
) -> None:
    config = config_for(running, tmp_path)
    snap = await snapshot_of(running)
    out, err = io.StringIO(), io.StringIO()
    command = 'echo "hi from $(basename "$(dirname "$HOME")")"; echo oops >&2'
    assert await exec_command(config, snap, FLEET, command, out=out, err=err) == 0
    assert out.getvalue().splitlines() == [f"{FLEET}/0/{i}: hi from worker-{i}" for i in range(4)]
    assert err.getvalue().splitlines() == [f"{FLEET}/0/{i}: oops" for i in range(4)]

    out = io.StringIO()
    status = await exec_command(config, snap, f"{FLEET}/0", "echo x; exit 3", workers="1-2",
                                out=out, err=io.StringIO())  # fmt: skip
    assert status == 3
    assert out.getvalue().splitlines() == [f"{FLEET}/0/1: x", f"{FLEET}/0/2: x"]


async def test_cp_copies_a_file_to_the_selected_workers(running: Harness, tmp_path: Path) -> None:
    config = config_for(running, tmp_path)
    source = tmp_path / "app.toml"
    source.write_text("lr = 0.1\n")
    source.chmod(0o640)
    out = io.StringIO()
    status = await copy(config, await snapshot_of(running), str(source), f"{FLEET}:cfg/app.toml",
                        workers="0", out=out)  # fmt: skip
    assert status == 0
    assert out.getvalue() == f"{FLEET}/0/0: cfg/app.toml (9 bytes)\n"
    copied = running.home(0) / "cfg" / "app.toml"
    assert copied.read_text() == "lr = 0.1\n"
    assert copied.stat().st_mode & 0o777 == 0o640
    assert not (running.home(1) / "cfg" / "app.toml").exists()

    snap = await snapshot_of(running)
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(CommandError) as refused:
        await copy(config, snap, missing, f"{FLEET}:x")
    assert str(refused.value) == f"{missing}: no such file"
    with pytest.raises(CommandError) as refused:
        await copy(config, snap, str(tmp_path), f"{FLEET}:x")
    assert str(refused.value) == f"{tmp_path}: is a directory (cp copies one file)"


async def test_logs_shows_and_follows_one_workers_log(running: Harness, tmp_path: Path) -> None:
    config = config_for(running, tmp_path)
    snap = await snapshot_of(running)
    out = io.BytesIO()
    assert await logs(config, snap, f"{FLEET}/0", worker=2, out=out) == 0
    lines = out.getvalue().decode().splitlines()
    assert lines[0].startswith("[tpucared] ")
    assert " start pid=" in lines[0]
    assert lines[1:] == ["worker 2 starts"]

    followed = io.BytesIO()
    task = asyncio.create_task(logs(config, snap, f"{FLEET}/0", worker=2, follow=True,
                                    out=followed))  # fmt: skip
    (running.home(2) / "tick-0").touch()
    await eventually(lambda: b"tick 0\n" in followed.getvalue(), "the new line is followed")
    (running.home(2) / "tick-1").touch()
    await eventually(lambda: b"tick 1\n" in followed.getvalue(), "and the next one")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_bad_selections_are_usage_errors(running: Harness, tmp_path: Path) -> None:
    config = config_for(running, tmp_path)
    snap = await snapshot_of(running)
    with pytest.raises(CommandError, match="unknown fleet other"):
        await exec_command(config, snap, "other", "true")
    with pytest.raises(CommandError, match="no such slot"):
        await exec_command(config, snap, f"{FLEET}/7", "true")
    with pytest.raises(CommandError, match="worker 4 does not exist"):
        await exec_command(config, snap, FLEET, "true", workers="4")
    with pytest.raises(CommandError, match="logs needs FLEET/SLOT"):
        await logs(config, snap, FLEET)
    missing = Config(**{**config.__dict__, "ssh": ssh_config(1, tmp_path / "nope")})
    with pytest.raises(CommandError, match="no SSH key"):
        await exec_command(missing, snap, FLEET, "true")


async def test_a_slot_without_a_ready_node_is_named(running: Harness, tmp_path: Path) -> None:
    config = config_for(running, tmp_path)
    await running.control(0, "preempt")
    await running.tick_until(lambda p: "transition" in [a.kind for a in p.actions], "dead")
    err = io.StringIO()
    snap = await snapshot_of(running)
    assert await exec_command(config, snap, FLEET, "true", err=err) == 1
    assert err.getvalue().startswith(f"{FLEET}/0: the node is not READY")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("sweep", Where("sweep", None)), ("sweep/0", Where("sweep", 0)), ("a-b/12", Where("a-b", 12))],
)
def test_parse_where(text: str, expected: Where) -> None:
    assert parse_where(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize("text", ["", "Sweep", "sweep/", "sweep/01", "sweep/-1", "sweep/0/1"])
def test_parse_where_refuses(text: str) -> None:
    with pytest.raises(CommandError):
        parse_where(text)


def test_parse_workers_and_remote() -> None:
    assert parse_workers("all") == Workers()
    assert parse_workers("3") == Workers(3)
    assert parse_workers("1-2") == Workers(1, 2)
    for bad in ("", "x", "2-1", "-1", "1-"):
        with pytest.raises(CommandError):
            parse_workers(bad)
    assert parse_remote("sweep/1:~/x") == (Where("sweep", 1), "~/x")
    with pytest.raises(CommandError):
        parse_remote("sweep/1")


async def test_the_cli_runs_exec_with_a_config_file(running: Harness, tmp_path: Path) -> None:
    """`tpucared exec -c FILE FLEET/SLOT --worker 0-1 -- CMD` end to end through the CLI."""
    config = config_for(running, tmp_path)  # writes the key file the daemon pinned with
    (spec,) = config.fleets
    fleet = daemon_config.fleet(
        spec.name,
        zones=list(spec.zones),
        accelerator_type=spec.accelerator_type,
        runtime_version=spec.extra["runtime_version"],
        size=spec.size,
        workload={"run": "sleep 1"},
    )
    daemon_config.write(
        config.path,
        daemon_config.against_emulator(
            config.gcp.endpoint,
            fleet,
            daemon={"db": str(config.daemon.db), "poll_interval": None, "http": None},
            ssh={"user": config.ssh.user, "port": config.ssh.port, "key": str(config.ssh.key)},
        ),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tpucared", "exec", "-c", str(config.path), f"{FLEET}/0",
        "--worker", "0-1", "--", "echo", "hello from $TPUCARED_NODE",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    # Two words after `--` are joined with shell quoting: the variable stays unexpanded text.
    assert stdout.decode().splitlines() == [
        f"{FLEET}/0/0: hello from $TPUCARED_NODE",
        f"{FLEET}/0/1: hello from $TPUCARED_NODE",
    ]
    # Only the command's own output: no info lines from ssh.fanout (warnings would show).
    assert stderr.decode() == ""


def test_a_config_problem_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "fleet.toml"
    bad.write_text('[daemon]\ndb = "x.db"\n[gcp]\nproject = "p"\n')
    out = subprocess.run(
        [sys.executable, "-m", "tpucared", "exec", "-c", str(bad), "sweep", "--", "true"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith(f"tpucared: {bad}: gcp.project: expected a project id")
