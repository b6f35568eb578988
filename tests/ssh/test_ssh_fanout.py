"""The fan-out against asyncssh worker hosts (the emulator's model of a worker).

Concurrency bound, retries with injected sleep, error kinds, output tails, stdin, the pool's
reuse and recovery, uploads, and a detached launch on an asyncssh host.
"""

from __future__ import annotations

import asyncio
import random
import stat
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncssh
import pytest
from ssh_localhost import LocalWorkerHost
from ssh_targets import targets_of
from structlog.testing import capture_logs

from tpucared.launch import (
    RunState,
    launch_script,
    parse_launch,
    parse_probe,
    probe_script,
    secrets_file_contents,
)
from tpucared.ssh import (
    NO_RETRY,
    ConnectionPool,
    FileUpload,
    RetryPolicy,
    SshErrorKind,
    Target,
    run_on_all,
    sh_command,
    upload,
)

StartHost = Callable[..., Awaitable[LocalWorkerHost]]
FAST = RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.05, jitter=0.0)


def addresses(block: int, n: int) -> list[str]:
    return [f"127.88.{block}.{i}" for i in range(1, n + 1)]


class FakeSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def test_concurrency_is_bounded_and_results_keep_target_order(
    local_hosts: StartHost, client_key: asyncssh.SSHKey
) -> None:
    host = await local_hosts(addresses(2, 10))
    targets = targets_of(host)
    started = time.monotonic()
    results = await run_on_all(
        targets,
        lambda t: f"sleep 0.2; echo worker-{t.worker}; exit {t.worker}",
        key=client_key,
        concurrency=3,
    )
    assert host.max_active == 3  # reached, never exceeded
    assert time.monotonic() - started >= 4 * 0.2  # ceil(10 / 3) rounds
    assert [r.worker for r in results] == list(range(10))
    assert [r.exit_status for r in results] == list(range(10))
    assert [r.stdout_tail for r in results] == [f"worker-{i}\n" for i in range(10)]
    assert results[0].ok
    assert not results[1].ok
    assert results[1].completed


async def test_permission_denied_while_keys_propagate_is_retried_with_backoff(
    local_hosts: StartHost, pool: ConnectionPool
) -> None:
    host = await local_hosts(addresses(3, 1), deny_auth_connections=2)
    sleep = FakeSleep()
    policy = RetryPolicy(attempts=5, initial_delay=1.0, multiplier=2.0, max_delay=10, jitter=0.5)
    with capture_logs() as logs:
        (result,) = await run_on_all(
            targets_of(host),
            "echo in",
            pool=pool,
            retry=policy,
            sleep=sleep,
            rng=random.Random(7),
        )
    assert result.ok
    assert result.stdout_tail == "in\n"
    assert result.attempts == 3
    assert host.connections == 3
    assert len(sleep.delays) == 2
    assert 0.5 <= sleep.delays[0] <= 1.5
    assert 1.0 <= sleep.delays[1] <= 3.0
    retries = [e for e in logs if e["event"] == "ssh.retry"]
    assert [(e["error"], e["attempt"]) for e in retries] == [("auth", "1/5"), ("auth", "2/5")]


async def test_connection_closed_during_handshake_is_retried(
    local_hosts: StartHost, pool: ConnectionPool
) -> None:
    host = await local_hosts(addresses(4, 2), drop_connections=1)
    with capture_logs() as logs:
        results = await run_on_all(targets_of(host), "true", pool=pool, retry=FAST)
    assert all(r.ok for r in results)
    assert sorted(r.attempts for r in results) == [1, 2]
    assert [e["error"] for e in logs if e["event"] == "ssh.retry"] == ["closed"]


async def test_a_quiet_fanout_logs_at_debug_unless_a_worker_failed(
    local_hosts: StartHost, pool: ConnectionPool
) -> None:
    host = await local_hosts(addresses(4, 2))
    with capture_logs() as logs:
        await run_on_all(targets_of(host), "true", pool=pool, quiet=True, label="probe")
        await run_on_all(
            [*targets_of(host), Target(worker=2, host="127.0.0.1", port=1)],
            "true",
            pool=pool,
            quiet=True,
            retry=NO_RETRY,
        )
    levels = [e["log_level"] for e in logs if e["event"] == "ssh.fanout"]
    assert levels == ["debug", "warning"]


async def test_exhausted_retries_report_the_last_error_kind(
    local_hosts: StartHost, pool: ConnectionPool
) -> None:
    host = await local_hosts(addresses(5, 1), deny_auth_connections=10)
    sleep = FakeSleep()
    with capture_logs() as logs:
        (result,) = await run_on_all(targets_of(host), "true", pool=pool, retry=FAST, sleep=sleep)
    (summary,) = [e for e in logs if e["event"] == "ssh.fanout"]
    assert summary["log_level"] == "warning"
    assert summary["errors"] == {"auth": 1}
    assert list(summary["failed"]) == [f"0@{host.addresses[0]}"]
    assert result.error is SshErrorKind.AUTH
    assert result.attempts == 4
    assert result.exit_status is None
    assert not result.ok
    assert not result.completed
    assert "PermissionDenied" in (result.error_message or "")
    assert len(sleep.delays) == 3


async def test_refused_port_without_retry(pool: ConnectionPool) -> None:
    (result,) = await run_on_all(
        [Target(worker=0, host="127.88.6.1", port=1, user="x")],
        "true",
        pool=pool,
        retry=NO_RETRY,
    )
    assert result.error is SshErrorKind.REFUSED
    assert result.attempts == 1


async def test_host_key_mismatch_is_never_retried_and_names_the_key_seen(
    local_hosts: StartHost, pool: ConnectionPool
) -> None:
    host = await local_hosts(addresses(7, 1))
    wrong = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    sleep = FakeSleep()
    (result,) = await run_on_all(
        targets_of(host, pinned_host_keys=(wrong,)), "true", pool=pool, retry=FAST, sleep=sleep
    )
    assert result.error is SshErrorKind.HOST_KEY_MISMATCH
    assert result.attempts == 1
    assert sleep.delays == []
    assert result.host_key == host.public_host_key()
    assert "does not match the key pinned" in (result.error_message or "")
    (tofu,) = await run_on_all(targets_of(host), "true", pool=pool)
    assert tofu.ok
    assert tofu.host_key == host.public_host_key()


async def test_command_timeout_keeps_partial_output(
    local_hosts: StartHost, pool: ConnectionPool
) -> None:
    host = await local_hosts(addresses(8, 1))
    (result,) = await run_on_all(
        targets_of(host), "echo before; sleep 5", pool=pool, command_timeout=0.5, retry=FAST
    )
    assert result.error is SshErrorKind.COMMAND_TIMEOUT
    assert result.attempts == 1
    assert result.stdout_tail == "before\n"


async def test_output_tails_and_stdin(local_hosts: StartHost, pool: ConnectionPool) -> None:
    host = await local_hosts(addresses(9, 2))
    script = "head -c 300000 /dev/zero | tr '\\0' x; echo END; echo err >&2; cat"
    results = await run_on_all(
        targets_of(host),
        script,
        pool=pool,
        tail_bytes=1000,
        stdin=lambda t: f"stdin-{t.worker}".encode(),
    )
    for r in results:
        assert r.ok
        assert len(r.stdout_tail) == 1000
        assert r.stdout_tail.endswith(f"END\nstdin-{r.worker}")
        assert r.stderr_tail == "err\n"


async def test_pool_reuses_connections_and_recovers_after_restart(
    local_hosts: StartHost, pool: ConnectionPool
) -> None:
    host = await local_hosts(addresses(10, 3))
    targets = targets_of(host)
    for _ in range(3):
        assert all(r.ok for r in await run_on_all(targets, "true", pool=pool))
    assert host.connections == 3
    assert len(pool) == 3
    # The worker's sshd goes away and comes back (same address): pooled connections are dead.
    await host.stop()
    replacement = await local_hosts(host.addresses, port=host.port, host_key=host.host_key)
    results = await run_on_all(targets, "echo back", pool=pool, retry=FAST)
    assert [r.stdout_tail for r in results] == ["back\n"] * 3
    assert [r.attempts for r in results] == [1, 1, 1]  # a stale connection costs no attempt
    assert replacement.connections == 3


async def test_pool_separates_incarnations_evicts_and_prunes(
    local_hosts: StartHost, client_key: asyncssh.SSHKey
) -> None:
    host = await local_hosts(addresses(11, 3))
    async with ConnectionPool(client_key, max_connections=2) as pool:
        targets = targets_of(host, incarnation="1")
        await run_on_all(targets, "true", pool=pool)
        assert len(pool) == 2  # least recently used idle connection closed
        recreated = targets_of(host, incarnation="2")
        await run_on_all(recreated[:1], "true", pool=pool)
        assert host.connections == 4  # a new incarnation never reuses the old connection
        await pool.prune(recreated[:1])
        assert len(pool) == 1
        # By incarnation (what the daemon does each tick): the live one's connections stay.
        await run_on_all(targets[:1], "true", pool=pool)
        assert len(pool) == 2
        await pool.prune_incarnations({"2"})
        assert len(pool) == 1
        await run_on_all(recreated[:1], "true", pool=pool)
        assert host.connections == 5  # incarnation 2's connection was kept and reused
        await pool.prune_incarnations(set())
        assert len(pool) == 0


async def test_eviction_skips_connections_in_use_and_closes_the_least_recently_used_idle(
    local_hosts: StartHost, client_key: asyncssh.SSHKey
) -> None:
    """A long command (a notice watch) keeps its connection however old it is; the idle one
    used longest ago goes first, and nothing in use is ever closed."""
    host = await local_hosts(addresses(42, 4))
    a, b, c, d = targets_of(host)
    async with ConnectionPool(client_key, max_connections=2) as pool:
        watch = asyncio.create_task(run_on_all([a], "sleep 1.5", pool=pool, waits=True))
        await asyncio.sleep(0.5)  # a's connection is the oldest, and in use
        await run_on_all([b], "true", pool=pool)
        await run_on_all([c], "true", pool=pool)  # over the cap: b (idle, older) goes
        assert len(pool) == 2
        await run_on_all([d], "true", pool=pool)  # c goes, a stays: its watch still runs
        (result,) = await watch
        assert result.ok
        assert host.connections == 4
        await run_on_all([a, d], "true", pool=pool)  # both still pooled: no new connection
        assert host.connections == 4
        await run_on_all([b], "true", pool=pool)
        assert host.connections == 5  # b was closed, so it connects again
        assert len(pool) == 2


async def test_upload_writes_files_atomically_with_mode(
    local_hosts: StartHost, pool: ConnectionPool, tmp_path: Path
) -> None:
    host = await local_hosts(addresses(12, 2))
    local = tmp_path / "script.sh"
    local.write_text("echo hi\n")
    local.chmod(0o755)
    secrets = FileUpload(str(tmp_path / "w" / "secrets"), secrets_file_contents({"K": "v"}), 0o600)
    code = FileUpload.from_local(local, str(tmp_path / "w" / "bin" / "script.sh"))
    assert "v" not in repr(secrets)
    results = await upload(targets_of(host)[:1], [secrets, code], pool=pool)
    assert [r.ok for r in results] == [True]
    assert (
        tmp_path / "w" / "secrets"
    ).read_bytes() == b"# Written by tpucared; sourced by the run wrapper. Do not edit.\nK=v\n"
    assert stat.S_IMODE((tmp_path / "w" / "secrets").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "w" / "bin" / "script.sh").stat().st_mode) == 0o755


async def test_upload_reports_each_worker_and_stops_sending_to_failed_ones(
    local_hosts: StartHost, pool: ConnectionPool, tmp_path: Path
) -> None:
    host = await local_hosts(addresses(14, 1))
    dead = Target(worker=1, host="127.88.14.2", port=host.port, user="tester")
    files = [FileUpload(str(tmp_path / name), name.encode()) for name in ("a", "b")]
    results = await upload([*targets_of(host), dead], files, pool=pool, retry=NO_RETRY)
    assert [(r.worker, r.ok, r.error) for r in results] == [
        (0, True, None),
        (1, False, SshErrorKind.REFUSED),
    ]
    assert results[0].stdout_tail == "TPUCARED_WRITE state=ok bytes=1\n"  # the last file's
    assert (tmp_path / "a").read_text() == "a"
    assert (tmp_path / "b").read_text() == "b"
    assert host.connections == 1  # one connection carried both files


async def test_detached_launch_and_probe_on_an_asyncssh_host(
    local_hosts: StartHost, pool: ConnectionPool, run_dirs: Callable[[str], Path]
) -> None:
    host = await local_hosts(addresses(13, 2))
    targets = targets_of(host)
    dirs = {t.worker: run_dirs(f"w{t.worker}") for t in targets}
    launched = await run_on_all(
        targets,
        lambda t: sh_command(launch_script(str(dirs[t.worker]), "sleep 0.3; exit 4", {})),
        pool=pool,
        command_timeout=10,
    )
    assert [parse_launch(r.stdout_tail).state.value for r in launched] == ["started"] * 2
    for _ in range(100):
        probes = await run_on_all(
            targets, lambda t: sh_command(probe_script(str(dirs[t.worker]))), pool=pool
        )
        states = [parse_probe(r.stdout_tail) for r in probes]
        if all(p.state is RunState.EXITED for p in states):
            break
        await asyncio.sleep(0.05)
    assert [(p.state, p.exit_code) for p in states] == [(RunState.EXITED, 4)] * 2


def test_pool_rejects_mixing_pool_and_key(client_key: asyncssh.SSHKey) -> None:
    async def mixed() -> None:
        async with ConnectionPool(client_key) as pool:
            await run_on_all([], "true", pool=pool, key=client_key)

    with pytest.raises(TypeError, match="settings of the pool"):
        asyncio.run(mixed())


@pytest.mark.parametrize("waits", [True, False])
async def test_a_waiting_command_holds_the_bound_only_to_start(
    local_hosts: StartHost, client_key: asyncssh.SSHKey, waits: bool
) -> None:
    """The daemon's preemption-notice watches run for minutes, one per running slice: were
    each to hold one of the pool's `limit` for its whole run, `concurrency` running slices
    would starve every probe and launch (as a 1,000-slice fleet with the default 64 did)."""
    host = await local_hosts(addresses(41, 2))
    watched, other = targets_of(host)
    async with ConnectionPool(client_key, concurrency=1, connect_timeout=5.0) as pool:
        watch = asyncio.create_task(
            run_on_all([watched], "sleep 3; echo watched", pool=pool, waits=waits, label="w")
        )
        await asyncio.sleep(0.5)  # the watch has started
        started = time.monotonic()
        (quick,) = await run_on_all([other], "echo quick", pool=pool, label="q")
        elapsed = time.monotonic() - started
        (watch_result,) = await watch
        await pool.limit.acquire()  # every slot given back, exactly once: one free, no more
        assert pool.limit.locked()
        pool.limit.release()
    assert quick.ok
    assert watch_result.ok
    assert watch_result.stdout_tail == "watched\n"
    if waits:
        assert elapsed < 2.0  # did not wait for the watch to end
    else:
        assert elapsed >= 2.0  # the plain command's bound: the other one waited its turn
