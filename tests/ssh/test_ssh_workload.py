"""The workload scripts over a real OpenSSH sshd: detached launch, probe, secrets, cleanup, setup.

The sshd logs in the user running the tests, on this machine, so the tests inspect the
worker's side directly: /proc for sessions, process groups, signal masks, command lines and
environments; the run directory's files.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO

import asyncssh
import pytest

from tpucared.launch import (
    CleanupState,
    LaunchState,
    ProbeResult,
    RunState,
    cleanup_script,
    launch_script,
    log_tail_command,
    parse_cleanup,
    parse_launch,
    parse_probe,
    probe_script,
    secrets_file_contents,
    setup_script,
    workload_environment,
)
from tpucared.ssh import (
    ConnectionPool,
    FileUpload,
    Target,
    WorkerResult,
    run_on_all,
    sh_command,
    upload,
)

RunDirs = Callable[[str], Path]
NASTY = 'it\'s "q" $HOME `id` \\ x\ny'


async def run1(target: Target, script: str, pool: ConnectionPool) -> WorkerResult:
    (result,) = await run_on_all([target], sh_command(script), pool=pool, command_timeout=30)
    assert result.completed, result
    return result


async def probe(target: Target, run_dir: Path, pool: ConnectionPool) -> ProbeResult:
    return parse_probe((await run1(target, probe_script(str(run_dir)), pool)).stdout_tail)


async def wait_exited(target: Target, run_dir: Path, pool: ConnectionPool) -> ProbeResult:
    for _ in range(100):
        result = await probe(target, run_dir, pool)
        if result.state is not RunState.RUNNING:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"still running: {result}")


def stat_of(pid: int) -> tuple[str, int, int]:
    """(state, process group, session) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[2]), int(fields[3])


def live_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, group, _ = stat_of(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
            if group == pgid and state != "Z":
                members.append(int(entry.name))
    return members


def cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def ignored_signals(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("SigIgn:")[1].split()[0], 16)


def all_cmdlines() -> list[bytes]:
    cmdlines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdlines.append((entry / "cmdline").read_bytes())
            except OSError:
                continue
    return cmdlines


def environs(pids: list[int]) -> list[bytes]:
    return [Path(f"/proc/{p}/environ").read_bytes() for p in pids]


def holds(pid: int, path: Path) -> bool:
    fd0 = Path(f"/proc/{pid}/fd/0")
    try:
        return fd0.resolve() == path
    except OSError:
        return False


def sha256_hex(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()


def spawn(argv: list[str], stdin: IO[str] | None = None) -> subprocess.Popen[bytes]:
    """A process in its own session, as a stray TPU user left by an earlier run would be."""
    return subprocess.Popen(argv, stdin=stdin, start_new_session=True)


def env(worker: int = 0, **extra: str) -> dict[str, str]:
    return workload_environment(
        fleet="sweep",
        slot=2,
        node="sweep-2",
        worker=worker,
        num_workers=6,
        run_id="sweep-2-r",
        attempt=3,
        preemptions=1,
        failures=0,
        env=extra,
    )


async def test_detached_launch_outlives_the_connection_and_records_its_exit(
    sshd_targets: list[Target], client_key: asyncssh.SSHKey, run_dirs: RunDirs
) -> None:
    target, run_dir = sshd_targets[0], run_dirs("detached")
    script = launch_script(str(run_dir), "echo start; sleep 1; echo done; exit 3", env())
    # A one-off pool: its connection is closed when run_on_all returns.
    (launched,) = await run_on_all([target], sh_command(script), key=client_key)
    launch = parse_launch(launched.stdout_tail)
    assert launch.state is LaunchState.STARTED
    assert launch.pid is not None
    pid = launch.pid

    # Own session and process group; SIGINT not ignored by the workload (a `&` job would have
    # it ignored). The two notice watchers are `&` jobs of the wrapper (forks: the same command
    # line) in the same group, with their requests: those may ignore it, not being the run.
    assert stat_of(pid)[1:] == (pid, pid)
    members = live_members(pid)
    wrapper = cmdline(pid)
    watchers = {m for m in members if m != pid and cmdline(m) == wrapper}
    assert len(watchers) == 2
    workload = [m for m in members if cmdline(m) != wrapper and parent(m) not in watchers]
    assert workload  # the workload's shell (and its sleep)
    for member in workload:
        assert not ignored_signals(member) & (1 << (signal.SIGINT - 1)), member

    async with ConnectionPool(client_key) as pool:
        running = await probe(target, run_dir, pool)
        assert (running.state, running.pid) == (RunState.RUNNING, pid)
        assert running.log_bytes is not None
        assert running.log_bytes > 0
        exited = await wait_exited(target, run_dir, pool)
    assert (exited.state, exited.exit_code) == (RunState.EXITED, 3)
    assert exited.log_bytes == (run_dir / "log").stat().st_size
    log = (run_dir / "log").read_text()
    assert "start\n" in log
    assert "done\n" in log
    assert "[tpucared]" in log
    assert "exit code=3" in log
    assert (run_dir / "exit_code").read_text() == "3\n"
    async with ConnectionPool(client_key) as pool:
        tail = await run1(target, log_tail_command(str(run_dir), lines=2), pool)
    assert tail.stdout_tail == "done\n" + log.splitlines(keepends=True)[-1]
    assert (run_dir / "pid").read_text() == f"{pid}\n"
    assert not list(run_dir.glob("*.tmp"))


async def test_launch_is_idempotent(
    sshd_targets: list[Target], pool: ConnectionPool, run_dirs: RunDirs
) -> None:
    target, run_dir = sshd_targets[1], run_dirs("idempotent")
    script = launch_script(str(run_dir), "echo once; sleep 0.8; exit 0", env(1))
    # Two launches racing (e.g. a retried action after a daemon restart) start one run.
    first, second = await asyncio.gather(run1(target, script, pool), run1(target, script, pool))
    launches = sorted(
        [parse_launch(first.stdout_tail), parse_launch(second.stdout_tail)],
        key=lambda r: r.state.value,
    )
    assert [r.state for r in launches] == [LaunchState.RUNNING, LaunchState.STARTED]
    assert launches[0].pid == launches[1].pid
    again = parse_launch((await run1(target, script, pool)).stdout_tail)
    assert (again.state, again.pid) == (LaunchState.RUNNING, launches[1].pid)
    await wait_exited(target, run_dir, pool)
    # After the run exited, the same run directory reports the exit instead of starting again.
    after = parse_launch((await run1(target, script, pool)).stdout_tail)
    assert (after.state, after.exit_code) == (LaunchState.EXITED, 0)
    assert (run_dir / "log").read_text().count("once\n") == 1


async def test_workload_sees_contract_env_and_user_env_in_its_workdir(
    sshd_targets: list[Target], pool: ConnectionPool, run_dirs: RunDirs, tmp_path: Path
) -> None:
    target, run_dir = sshd_targets[2], run_dirs("env")
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    script = launch_script(
        str(run_dir),
        'env -0 > env.out; echo "$BASH_VERSION" > shell.out',
        env(2, NASTY=NASTY, WANDB_PROJECT="gpt"),
        workdir=str(workdir),
    )
    assert parse_launch((await run1(target, script, pool)).stdout_tail).state is LaunchState.STARTED
    assert (await wait_exited(target, run_dir, pool)).exit_code == 0
    seen = dict(
        item.split("=", 1) for item in (workdir / "env.out").read_text().split("\0") if item
    )
    resolved = await asyncio.to_thread(Path(run_dir).resolve)
    assert {k: v for k, v in seen.items() if k.startswith("TPUCARED_")} == {
        "TPUCARED_FLEET": "sweep",
        "TPUCARED_SLOT": "2",
        "TPUCARED_NODE": "sweep-2",
        "TPUCARED_WORKER": "2",
        "TPUCARED_NUM_WORKERS": "6",
        "TPUCARED_RUN_ID": "sweep-2-r",
        "TPUCARED_ATTEMPT": "3",
        "TPUCARED_PREEMPTIONS": "1",
        "TPUCARED_FAILURES": "0",
        "TPUCARED_SLICE": "0",
        "TPUCARED_NUM_SLICES": "1",
        # Written by the run's notice watcher on a preemption notice (run.sh).
        "TPUCARED_PREEMPTION_NOTICE_FILE": f"{resolved}/notice",
        "TPUCARED_PROGRESS_FILE": f"{resolved}/progress",
    }
    assert seen["NASTY"] == NASTY
    assert seen["WANDB_PROJECT"] == "gpt"
    assert "SSH_CONNECTION" not in seen  # stale after the launching session ends
    assert (workdir / "shell.out").read_text().strip()  # bash, as with `gcloud ssh --command`


async def test_secret_reaches_the_workload_but_no_command_line_script_or_log(
    sshd_targets: list[Target], pool: ConnectionPool, run_dirs: RunDirs, tmp_path: Path
) -> None:
    target, run_dir = sshd_targets[3], run_dirs("secret")
    secret = "s3cr3t-7f1e-not-in-argv"
    secrets_path = tmp_path / "worker-home" / ".tpucared" / "secrets"
    (written,) = await upload(
        [target],
        [
            FileUpload(
                str(secrets_path), secrets_file_contents({"WANDB_API_KEY": secret}), mode=0o600
            )
        ],
        pool=pool,
    )
    assert written.ok, written
    assert (secrets_path.stat().st_mode & 0o777) == 0o600
    script = launch_script(
        str(run_dir), 'sleep 1; printf %s "$WANDB_API_KEY" | sha256sum', env(3), str(secrets_path)
    )
    assert secret not in script
    assert secret not in sh_command(script)
    launch = parse_launch((await run1(target, script, pool)).stdout_tail)
    assert launch.state is LaunchState.STARTED
    assert launch.pid is not None

    cmdlines = all_cmdlines()
    assert len(cmdlines) > 10
    assert not [c for c in cmdlines if secret.encode() in c]
    delivered = environs(live_members(launch.pid))
    assert any(f"WANDB_API_KEY={secret}".encode() in e for e in delivered)

    assert (await wait_exited(target, run_dir, pool)).exit_code == 0
    log = (run_dir / "log").read_text()
    assert sha256_hex(secret) in log
    assert secret not in log
    assert secret not in (run_dir / "run.sh").read_text()


async def test_missing_secrets_file_fails_the_launch(
    sshd_targets: list[Target], pool: ConnectionPool, run_dirs: RunDirs, tmp_path: Path
) -> None:
    script = launch_script(str(run_dirs("nosecret")), "true", {}, str(tmp_path / "absent"))
    launch = parse_launch((await run1(sshd_targets[0], script, pool)).stdout_tail)
    assert (launch.state, launch.reason) == (LaunchState.ERROR, "secrets-missing")


async def test_probe_says_gone_for_no_run_killed_run_and_reboot(
    sshd_targets: list[Target], pool: ConnectionPool, run_dirs: RunDirs
) -> None:
    target = sshd_targets[4]
    nothing = await probe(target, run_dirs("never"), pool)
    assert (nothing.state, nothing.reason) == (RunState.GONE, "no-run")

    killed_dir = run_dirs("killed")
    launch = parse_launch(
        (await run1(target, launch_script(str(killed_dir), "sleep 30", {}), pool)).stdout_tail
    )
    assert launch.pid is not None
    os.killpg(launch.pid, signal.SIGKILL)  # wrapper too: no exit code can be written
    for _ in range(50):
        killed = await probe(target, killed_dir, pool)
        if killed.state is RunState.GONE:
            break
        await asyncio.sleep(0.05)
    # The dead wrapper may linger as a zombie (no reaping init in containers): still gone.
    assert (killed.state, killed.reason) == (RunState.GONE, "died")

    rebooted_dir = run_dirs("rebooted")
    launch = parse_launch(
        (await run1(target, launch_script(str(rebooted_dir), "sleep 30", {}), pool)).stdout_tail
    )
    assert (await probe(target, rebooted_dir, pool)).state is RunState.RUNNING
    start = (rebooted_dir / "ident").read_text().split()[1]
    (rebooted_dir / "ident").write_text(f"another-boot-id {start}\n")
    rebooted = await probe(target, rebooted_dir, pool)
    assert (rebooted.state, rebooted.reason) == (RunState.GONE, "rebooted")


async def test_cleanup_kills_group_and_device_holders_and_removes_lockfile(
    sshd_targets: list[Target], pool: ConnectionPool, run_dirs: RunDirs, tmp_path: Path
) -> None:
    target, run_dir = sshd_targets[5], run_dirs("cleanup")
    # The workload: children in its group, one of which ignores TERM (needs KILL).
    command = "sleep 300 & sh -c 'trap \"\" TERM; exec sleep 301' & wait"
    launch = parse_launch(
        (await run1(target, launch_script(str(run_dir), command, {}), pool)).stdout_tail
    )
    assert launch.pid is not None
    for _ in range(50):
        if len(live_members(launch.pid)) >= 4:
            break
        await asyncio.sleep(0.02)
    group = live_members(launch.pid)
    assert len(group) >= 4  # wrapper, bash, sleep, sleep

    # Stray TPU holders in other sessions (a crashed earlier run): one polite, one not.
    devices = tmp_path / "dev"
    devices.mkdir()
    (devices / "accel0").touch()
    (devices / "vfio-0").touch()
    # The test process must not keep the "devices" open itself: cleanup would kill it too.
    with (devices / "accel0").open() as accel, (devices / "vfio-0").open() as vfio:
        polite = spawn(["sleep", "300"], stdin=accel)
        stubborn = spawn(["sh", "-c", "trap '' TERM; exec sleep 300"], stdin=vfio)
    lockfile = tmp_path / "libtpu_lockfile"
    lockfile.touch()
    try:
        script = cleanup_script(
            str(run_dir),
            grace_seconds=0.5,
            lockfile=str(lockfile),
            device_patterns=[f"{devices}/accel*", f"{devices}/vfio-*"],
        )
        result = parse_cleanup((await run1(target, script, pool)).stdout_tail)
        assert result.state is CleanupState.CLEAN
        assert result.group == "killed"
        assert result.holders_killed == 2
        assert result.busy_pids == ()
        assert result.lockfile == "removed"
        assert result.sees_all_processes  # root here; elsewhere via `sudo -n`
        assert not lockfile.exists()
        assert live_members(launch.pid) == []
        assert polite.wait(5) == -signal.SIGTERM
        assert stubborn.wait(5) == -signal.SIGKILL
        exited = await probe(target, run_dir, pool)
        assert (exited.state, exited.exit_code) == (RunState.EXITED, 143)  # TERM recorded

        again = parse_cleanup((await run1(target, script, pool)).stdout_tail)
        assert (again.state, again.group, again.holders_killed, again.lockfile) == (
            CleanupState.CLEAN,
            "none",
            0,
            "absent",
        )
    finally:
        for proc in (polite, stubborn):
            proc.kill()
            proc.wait()


async def test_cleanup_reports_busy_when_the_device_stays_held(
    sshd_targets: list[Target], pool: ConnectionPool, tmp_path: Path
) -> None:
    device = tmp_path / "accel0"
    device.touch()
    # Something keeps reopening the device. The loop's own shell must not hold it (dash opens
    # a loop command's redirection in the loop shell), so the open happens in an inner sh.
    respawner = spawn(
        ["sh", "-c", 'while :; do sh -c \'exec sleep 300 < "$0"\' "$1"; done', "sh", str(device)]
    )
    try:
        for _ in range(50):
            if any(holds(p, device) for p in live_members(respawner.pid)):
                break
            await asyncio.sleep(0.02)
        script = cleanup_script(
            None,
            grace_seconds=0.3,
            device_patterns=[str(device)],
            lockfile=str(tmp_path / "nolock"),
        )
        result = parse_cleanup((await run1(sshd_targets[0], script, pool)).stdout_tail)
        assert result.state is CleanupState.BUSY
        assert result.group == "none"
        assert result.lockfile == "absent"
        assert result.busy_pids
        assert set(result.busy_pids) <= set(live_members(respawner.pid))
    finally:
        os.killpg(respawner.pid, signal.SIGKILL)
        respawner.wait()


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


async def test_setup_clones_then_updates_to_ref_keeping_untracked_files(
    sshd_targets: list[Target], pool: ConnectionPool, tmp_path: Path
) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q")
    (origin / "train.py").write_text("v1\n")
    git(origin, "add", ".")
    git(origin, "commit", "-qm", "v1")
    git(origin, "tag", "v1")
    first = git(origin, "rev-parse", "HEAD")
    workdir = tmp_path / "worker" / "src"
    target = sshd_targets[1]

    def setup(ref: str | None) -> str:
        return setup_script(
            str(origin), ref, 'echo "ran $MARK" >> setup.log', str(workdir), env={"MARK": NASTY}
        )

    result = await run1(target, setup("main"), pool)
    assert result.ok, result.stderr_tail
    assert result.stdout_tail.strip() == f"TPUCARED_SETUP state=done commit={first}"
    assert (workdir / "train.py").read_text() == "v1\n"
    assert (workdir / "setup.log").read_text() == f"ran {NASTY}\n"
    (workdir / "checkpoint.bin").write_text("keep me")

    (origin / "train.py").write_text("v2\n")
    git(origin, "commit", "-qam", "v2")
    second = git(origin, "rev-parse", "HEAD")
    (workdir / "train.py").write_text("local edit\n")  # tracked edits are reset
    updated = await run1(target, setup("main"), pool)
    assert updated.ok
    assert f"commit={second}" in updated.stdout_tail
    assert (workdir / "train.py").read_text() == "v2\n"
    assert (workdir / "checkpoint.bin").read_text() == "keep me"

    for ref, expected in (("v1", first), (first, first), (None, second)):
        pinned = await run1(target, setup(ref), pool)
        assert pinned.ok, (ref, pinned)
        assert f"commit={expected}" in pinned.stdout_tail, (ref, pinned)

    broken = await run1(target, setup("no-such-ref"), pool)
    assert broken.exit_status != 0
    assert "no-such-ref" in broken.stderr_tail


@pytest.mark.parametrize("bad", ["", "x\0y"])
def test_launch_rejects_unusable_paths(bad: str) -> None:
    with pytest.raises(ValueError, match="remote path"):
        launch_script(bad, "true", {})
