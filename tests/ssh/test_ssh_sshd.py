"""The fan-out against a real OpenSSH sshd: per-worker outcomes, late sshd, host key pinning."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import asyncssh
import pytest
from ssh_sshd import OpenSshServer
from ssh_targets import targets_of

from tpucared.ssh import (
    ConnectionPool,
    RetryPolicy,
    SshErrorKind,
    Target,
    host_keys_from_guest_attributes,
    run_on_all,
)


async def test_fanout_on_six_workers_returns_each_exit_status_and_output(
    sshd_targets: list[Target], pool: ConnectionPool
) -> None:
    results = await run_on_all(
        sshd_targets,
        lambda t: f"echo out-{t.worker}; echo err-{t.worker} >&2; exit {t.worker * 10}",
        pool=pool,
    )
    assert [(r.worker, r.host) for r in results] == [(t.worker, t.host) for t in sshd_targets]
    assert [r.exit_status for r in results] == [0, 10, 20, 30, 40, 50]
    assert [r.stdout_tail for r in results] == [f"out-{i}\n" for i in range(6)]
    assert [r.stderr_tail for r in results] == [f"err-{i}\n" for i in range(6)]
    assert [r.error for r in results] == [None] * 6
    assert [r.ok for r in results] == [True] + [False] * 5


async def test_worker_whose_sshd_starts_late_still_succeeds(
    sshd_factory: Callable[[list[str]], OpenSshServer], pool: ConnectionPool
) -> None:
    server = sshd_factory(["127.88.20.1", "127.88.20.2"])
    policy = RetryPolicy(attempts=20, initial_delay=0.1, multiplier=1.5, max_delay=0.3)

    async def start_later() -> None:
        await asyncio.sleep(1.0)
        await asyncio.to_thread(server.start)

    started = time.monotonic()
    starter = asyncio.create_task(start_later())
    results = await run_on_all(
        targets_of(server), "hostname >/dev/null; echo up", pool=pool, retry=policy
    )
    await starter
    assert [r.stdout_tail for r in results] == ["up\n", "up\n"]
    assert all(r.attempts > 1 for r in results)
    assert time.monotonic() - started >= 1.0


async def test_host_key_tofu_then_pinned_then_wrong_pin(
    sshd: OpenSshServer, sshd_targets: list[Target], pool: ConnectionPool
) -> None:
    target = sshd_targets[0]
    # Trust on first use: the key seen comes back, and it is the server's ed25519 key.
    (first,) = await run_on_all([target], "true", pool=pool)
    assert first.ok
    assert first.host_key == sshd.host_key("ed25519")

    # Pinned from guest attributes (bare base64 value, as the guest agent writes it).
    pins = host_keys_from_guest_attributes({"ssh-ed25519": sshd.host_key().split()[1]})
    pinned = Target(target.worker, target.host, target.port, target.user, pins, incarnation="a")
    (ok,) = await run_on_all([pinned], "true", pool=pool)
    assert ok.ok
    assert ok.host_key == sshd.host_key()

    # Pinning the server's *other* key type works too: the client asks for that type.
    ecdsa = Target(
        target.worker,
        target.host,
        target.port,
        target.user,
        (sshd.host_key("ecdsa"),),
        incarnation="b",
    )
    (ok_ecdsa,) = await run_on_all([ecdsa], "true", pool=pool)
    assert ok_ecdsa.ok
    assert ok_ecdsa.host_key == sshd.host_key("ecdsa")

    # A different key within the incarnation (e.g. another machine got the address): refused.
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    wrong = Target(target.worker, target.host, target.port, target.user, (other,), incarnation="c")
    (refused,) = await run_on_all([wrong], "touch /tmp/should-not-run", pool=pool)
    assert refused.error is SshErrorKind.HOST_KEY_MISMATCH
    assert refused.attempts == 1
    assert refused.exit_status is None
    assert refused.host_key == sshd.host_key()


async def test_exit_signal_is_reported(sshd_targets: list[Target], pool: ConnectionPool) -> None:
    (result,) = await run_on_all(sshd_targets[:1], "kill -KILL $$", pool=pool)
    assert result.exit_signal == "KILL"
    assert result.exit_status is None
    assert not result.ok


@pytest.mark.parametrize("workers", [64])
async def test_many_workers_one_connection_each(
    sshd: OpenSshServer, client_key: asyncssh.SSHKey, workers: int
) -> None:
    # 64 workers spread over the six addresses and distinct incarnations: 64 handshakes.
    targets = [
        Target(i, sshd.addresses[i % 6], sshd.port, sshd.user, incarnation=str(i))
        for i in range(workers)
    ]
    started = time.monotonic()
    async with ConnectionPool(client_key, concurrency=16) as pool:
        results = await run_on_all(
            targets, "echo $PPID", pool=pool, retry=RetryPolicy(attempts=5, initial_delay=0.1)
        )
        assert len(pool) == workers
    assert all(r.ok for r in results), [r.error_message for r in results if not r.ok]
    assert len({r.stdout_tail for r in results}) == workers  # one sshd session each
    assert time.monotonic() - started < 15


async def test_openssh_negotiates_aes_gcm_not_the_python_chacha20(
    sshd_targets: list[Target], pool: ConnectionPool
) -> None:
    # chacha20-poly1305 is OpenSSH's own first choice, and asyncssh's is pure Python: the
    # client's preference order must win so a large fan-out stays cheap (docs/benchmarks.md).
    async with pool.lease(sshd_targets[0]) as lease:
        conn = lease.connection.conn
        assert conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
        assert conn.get_extra_info("recv_cipher") == "aes128-gcm@openssh.com"
