"""The remote scripts as pure functions: syntax under dash and bash, quoting, parsing.

Scripts run here through a local `sh` where that shows behaviour without SSH; what needs a
real SSH session (detachment, process groups, the TPU cleanup) is in test_ssh_workload.py.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpucared.launch import (
    CleanupState,
    LaunchState,
    RunState,
    SliceOf,
    cleanup_script,
    launch_script,
    parse_cleanup,
    parse_launch,
    parse_probe,
    probe_script,
    secrets_file_contents,
    setup_script,
    workload_environment,
)
from tpucared.ssh import ScriptOutputError, path_expr, write_file_script
from tpucared.ssh.shell import export_lines, parse_marker

NASTY = 'it\'s "quoted" $HOME `id` $(id) \\ back\nnew line; rm -rf / # * ? [a] ~'
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]


def sh(script: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["sh", "-c", script], input=stdin, capture_output=True, env=env, timeout=20, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def _env(**over: Any) -> dict[str, str]:
    """workload_environment for attempt 1 of a one-worker slot 0 of fleet "f", but `over`."""
    base: dict[str, Any] = dict(fleet="f", slot=0, node="n", worker=0, num_workers=1, run_id="r")
    return workload_environment(**(base | dict(attempt=1, preemptions=0, failures=0) | over))


def all_scripts() -> dict[str, str]:
    env = {"TPUCARED_WORKER": "0", "FOO": NASTY}
    return {
        "launch": launch_script("~/runs/a b", NASTY, env, "~/.tpucared/secrets", workdir="~/w d"),
        "launch-plain": launch_script("/tmp/x", "true", {}),
        "probe": probe_script("runs/it's"),
        "cleanup": cleanup_script("~/r", device_patterns=["/dev/accel*", "/tmp/o'k*"]),
        "cleanup-no-run": cleanup_script(None),
        "setup": setup_script("https://example.com/r.git", "v1", NASTY, "~/src", env=env),
        "setup-no-repo": setup_script(None, None, None, "/tmp/w"),
        "write": write_file_script("~/a/b's", mode=0o600, size=3),
    }


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", list(all_scripts()))
def test_every_script_parses(shell: str, name: str) -> None:
    done = subprocess.run(
        [shell, "-n", "-c", all_scripts()[name]], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
        st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=30),
        max_size=4,
    )
)
def test_exported_values_arrive_exactly(env: dict[str, str]) -> None:
    names = sorted(env)
    script = (
        "\n".join(export_lines(env)) + "\n" + "".join(f'printf "%s\\0" "${n}"\n' for n in names)
    )
    out = subprocess.run(["sh", "-c", script], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == [env[n] for n in names]


@settings(max_examples=25, deadline=None)
@given(
    secrets=st.dictionaries(
        st.sampled_from(["A", "WANDB_API_KEY", "HF_TOKEN"]),
        st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=40),
    )
)
def test_secrets_file_sources_to_exact_values(
    secrets: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("s") / "secrets"
    path.write_bytes(secrets_file_contents(secrets))
    names = " ".join(sorted(secrets))
    script = (
        f'set -a; . {path}; set +a; for n in {names}; do eval "printf \'%s\\0\' \\"\\$$n\\""; done'
    )
    out = subprocess.run(["sh", "-c", script], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == [secrets[n] for n in sorted(secrets)]


def test_secret_values_never_in_generated_scripts() -> None:
    secret = "s3cr3t-value-xyz"
    env = _env(node="f-0")
    script = launch_script("~/runs/1", "python3 train.py", env, "~/.tpucared/secrets")
    assert secret not in script
    assert secret.encode() in secrets_file_contents({"WANDB_API_KEY": secret})


@pytest.mark.parametrize(
    ("path", "expected", "expanded"),
    [
        ("~", '"$HOME"', "/home/w"),
        ("~/a b", "\"$HOME\"/'a b'", "/home/w/a b"),
        ("/abs", "/abs", "/abs"),
        ("rel/x", "rel/x", "rel/x"),
        ("~user/x", "'~user/x'", "~user/x"),  # only the login user's ~ is supported
        ("a'b $c", "'a'\"'\"'b $c'", "a'b $c"),
    ],
)
def test_path_expr(path: str, expected: str, expanded: str) -> None:
    assert path_expr(path) == expected
    assert sh(f"printf %s {path_expr(path)}", env={"HOME": "/home/w"}) == expanded


def test_path_expr_rejects_empty_and_nul() -> None:
    for bad in ("", "a\0b"):
        with pytest.raises(ValueError, match="remote path"):
            path_expr(bad)


def test_workload_environment_contract() -> None:
    env = workload_environment(
        fleet="sweep",
        slot=3,
        node="sweep-3",
        worker=1,
        num_workers=4,
        run_id="sweep-3-abc",
        attempt=2,
        preemptions=1,
        failures=0,
        env={"WANDB_PROJECT": "gpt"},
    )
    assert env == {
        "WANDB_PROJECT": "gpt",
        "TPUCARED_FLEET": "sweep",
        "TPUCARED_SLOT": "3",
        "TPUCARED_NODE": "sweep-3",
        "TPUCARED_WORKER": "1",
        "TPUCARED_NUM_WORKERS": "4",
        "TPUCARED_RUN_ID": "sweep-3-abc",
        "TPUCARED_ATTEMPT": "2",
        "TPUCARED_PREEMPTIONS": "1",
        "TPUCARED_FAILURES": "0",
        "TPUCARED_SLICE": "0",
        "TPUCARED_NUM_SLICES": "1",
    }
    with pytest.raises(ValueError, match="reserved"):
        _env(env={"TPUCARED_SLOT": "9"})
    with pytest.raises(ValueError, match="invalid environment variable name"):
        _env(env={"A-B": "1"})
    with pytest.raises(ValueError, match="out of range"):
        _env(worker=4, num_workers=4)


def test_write_file_script_is_atomic_sized_and_private(tmp_path: Path) -> None:
    target = tmp_path / "new dir" / "secrets"
    data = b"A='1'\n\0binary\xff"
    out = sh(write_file_script(str(target), mode=0o600, size=len(data)), stdin=data)
    assert parse_marker(out, "TPUCARED_WRITE") == {"state": "ok", "bytes": str(len(data))}
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700
    # A short read (connection dropped mid-transfer) leaves the old file in place.
    done = subprocess.run(
        ["sh", "-c", write_file_script(str(target), mode=0o644, size=99)],
        input=b"short",
        capture_output=True,
        check=False,
    )
    assert done.returncode != 0
    assert b"received 5 of 99 bytes" in done.stderr
    assert target.read_bytes() == data
    assert sorted(p.name for p in target.parent.iterdir()) == ["secrets"]


def test_probe_of_missing_run_dir_is_gone_no_run(tmp_path: Path) -> None:
    result = parse_probe(sh(probe_script(str(tmp_path / "nothing"))))
    assert result.state is RunState.GONE
    assert result.reason == "no-run"
    assert result.log_bytes is None


@pytest.mark.parametrize(
    ("stdout", "state", "pid", "code", "log_bytes"),
    [
        ("TPUCARED_PROBE state=running pid=42 log_bytes=10\n", RunState.RUNNING, 42, None, 10),
        ("motd\nTPUCARED_PROBE state=exited code=3 log_bytes=0", RunState.EXITED, None, 3, 0),
        ("TPUCARED_PROBE state=gone reason=died log_bytes=-1", RunState.GONE, None, None, None),
    ],
)
def test_parse_probe(
    stdout: str, state: RunState, pid: int | None, code: int | None, log_bytes: int | None
) -> None:
    result = parse_probe(stdout)
    assert (result.state, result.pid, result.exit_code, result.log_bytes) == (
        state,
        pid,
        code,
        log_bytes,
    )


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "state=running",
        "TPUCARED_PROBE state=zombie log_bytes=1",
        "TPUCARED_PROBE state=running log_bytes=1",
        "TPUCARED_PROBE state=exited code=x",
        "TPUCARED_PROBE garbage",
    ],
)
def test_parse_probe_rejects_malformed(stdout: str) -> None:
    with pytest.raises(ScriptOutputError):
        parse_probe(stdout)


def test_parse_launch_and_cleanup() -> None:
    assert parse_launch("TPUCARED_LAUNCH state=started pid=7").pid == 7
    launch = parse_launch("TPUCARED_LAUNCH state=error reason=secrets-missing")
    assert (launch.state, launch.reason) == (LaunchState.ERROR, "secrets-missing")
    cleanup = parse_cleanup(
        "TPUCARED_CLEANUP state=busy group=killed holders_killed=2 lockfile=removed busy_pids=12,13"
    )
    assert cleanup.state is CleanupState.BUSY
    assert cleanup.sees_all_processes  # absent field: older script, assume root
    own = parse_cleanup(
        "TPUCARED_CLEANUP state=clean group=none holders_killed=0 lockfile=absent scope=own "
        "busy_pids="
    )
    assert not own.sees_all_processes
    assert cleanup.busy_pids == (12, 13)
    assert (
        parse_cleanup(
            "TPUCARED_CLEANUP state=clean group=none holders_killed=0 lockfile=absent busy_pids="
        ).busy_pids
        == ()
    )


def test_cleanup_as_unprivileged_user_says_it_saw_only_its_own_processes(tmp_path: Path) -> None:
    # A root-owned holder is invisible to `nobody` (no sudo): the result must not claim more.
    device = tmp_path / "accel0"
    device.touch()
    tmp_path.chmod(0o755)
    with device.open() as held:
        holder = subprocess.Popen(["sleep", "60"], stdin=held, start_new_session=True)
    try:
        script = cleanup_script(
            None, grace_seconds=0.1, device_patterns=[str(device)], lockfile=str(tmp_path / "lock")
        )
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
            cwd="/",
        )
        result = parse_cleanup(done.stdout)
        assert not result.sees_all_processes
        assert result.holders_killed == 0
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()


def test_multislice_environment_is_what_jax_multislice_reads() -> None:
    # Levanter and Ray's TPU launchers: the coordinator is slice 0 worker 0's address, the
    # port 8081; the worker's index and count stay its slice's own (TPU_WORKER_ID-like).
    env = workload_environment(
        fleet="big",
        slot=0,
        node="big-0-1",
        worker=1,
        num_workers=2,
        run_id="big-0-abc",
        attempt=1,
        preemptions=0,
        failures=0,
        env={"MEGASCALE_PORT": "9999", "KEEP": "me"},
        slice_of=SliceOf(index=1, count=2, coordinator="10.0.0.2"),
    )
    assert {k: v for k, v in env.items() if k.startswith("MEGASCALE_")} == {
        "MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.2",
        "MEGASCALE_NUM_SLICES": "2",
        "MEGASCALE_SLICE_ID": "1",
        "MEGASCALE_PORT": "8081",  # the user's own yields: the slices must agree on it
    }
    assert (env["TPUCARED_SLICE"], env["TPUCARED_NUM_SLICES"]) == ("1", "2")
    assert (env["TPUCARED_WORKER"], env["TPUCARED_NUM_WORKERS"], env["KEEP"]) == ("1", "2", "me")


def test_the_pre_launch_check_frees_a_held_device_under_its_root_then_runs_the_health_check(
    tmp_path: Path,
) -> None:
    # The emulator's workers set TPUCARED_DEVICE_ROOT: /dev/accel* is looked for under it.
    (tmp_path / "dev").mkdir()
    (tmp_path / "tmp").mkdir()
    device = tmp_path / "dev" / "accel0"
    device.touch()
    with device.open() as held:
        holder = subprocess.Popen(["sleep", "60"], stdin=held, start_new_session=True)
    env = {"PATH": os.environ["PATH"], "TPUCARED_DEVICE_ROOT": str(tmp_path)}
    try:
        check = "echo probing; echo 'no TPU found' >&2; exit 3"
        out = sh(cleanup_script(None, grace_seconds=0.5, health_check=check), env=env)
        result = parse_cleanup(out)
        assert (result.state, result.holders_killed) == (CleanupState.CLEAN, 1)
        assert holder.wait(5) is not None
        assert (result.health, result.health_code) == ("failed", 3)
        assert result.health_output == ("probing", "no TPU found")
        slow = parse_cleanup(sh(cleanup_script(None, health_check="sleep 5", health_timeout=1),
                                env=env))  # fmt: skip
        assert (slow.health, slow.health_code) == ("failed", 124)  # timed out
        ok = parse_cleanup(sh(cleanup_script(None, health_check="true"), env=env))
        assert (ok.health, ok.health_code, ok.health_output) == ("ok", 0, ())
        assert parse_cleanup(sh(cleanup_script(None), env=env)).health == "none"
    finally:
        holder.kill()
        holder.wait()
