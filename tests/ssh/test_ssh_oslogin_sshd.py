"""OS Login enforced by a real OpenSSH sshd, the way a TPU VM enforces it.

sshd asks an `AuthorizedKeysCommand` (oslogin_authorized_keys.py) for the user's keys; the
command asks the emulator's metadata server (`oslogin/users?username=U`), as Google's
google_authorized_keys asks the real one. The daemon's keeper (runtime/oslogin.py) imports the
key through the emulator's OS Login API; the user is the profile's (`sa_...`), made a local
account here as the guest's NSS module would. Needs root (for the account and sshd's
privilege separation), as CI runs: otherwise the test fails, it never skips.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from ssh_sshd import OpenSshServer
from ssh_targets import targets_of

from tpucared.gcp import NoAuth
from tpucared.gcp.tpu import TpuClient
from tpucared.gcp.tpu.oslogin import OsLoginClient
from tpucared.runtime.clock import SystemClock
from tpucared.runtime.oslogin import OsLoginKeeper
from tpucared.runtime.startup import public_key_line
from tpucared.ssh import RetryPolicy, run_on_all
from tpucared_emulator import EmulatorServer

ACCOUNT = "trainer@oslogin-sshd.iam.gserviceaccount.com"
ADDRESSES = ["127.88.3.1", "127.88.3.2"]
COMMAND = Path(__file__).with_name("oslogin_authorized_keys.py")
NO_RETRY = RetryPolicy(attempts=1)
# sshd checks that the command's program (not its arguments) is root's and not writable by
# others, up to /: the interpreter's real path, not the venv's link.
PYTHON = os.path.realpath(sys.executable)


@pytest.fixture
def local_account() -> Iterator[Callable[[str], None]]:
    if os.geteuid() != 0:
        pytest.fail("this test makes a local account for the OS Login user: run it as root")
    made: list[str] = []

    def make(user: str) -> None:
        # "*" and not useradd's "!": sshd without PAM refuses a locked account.
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", "-p", "*", user], check=True)
        made.append(user)

    yield make
    for user in made:
        subprocess.run(["userdel", "-r", user], check=False, capture_output=True)


async def test_sshd_lets_in_only_the_keys_os_login_holds(
    emulator: EmulatorServer, host_keys: dict[str, Path], tmp_path: Path, local_account: Any
) -> None:
    sshd = OpenSshServer(
        directory=tmp_path / "sshd",
        addresses=ADDRESSES,
        authorized_keys=[],  # no key file: OS Login's keys only
        host_keys=host_keys,
        extra_config=(
            f"AuthorizedKeysCommand {PYTHON} -I {COMMAND} {emulator.url} %u\n"
            "AuthorizedKeysCommandUser root\n"
        ),
    )
    key, other = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    async with TpuClient(emulator.url, token_source=NoAuth()) as client:
        oslogin = OsLoginClient(client, emulator.url)
        keeper = OsLoginKeeper(oslogin, ACCOUNT, public_key_line(key, "sshd-test"), SystemClock())
        user = await keeper.ensure()
        local_account(user)
        sshd.start()
        try:
            targets = [replace(t, user=user) for t in targets_of(sshd)]

            async def whoami(k: asyncssh.SSHKey) -> list[str | None]:
                results = await run_on_all(
                    targets, 'echo "$USER"', key=k, retry=NO_RETRY, connect_timeout=5.0
                )
                return [r.stdout_tail.strip() if r.completed else None for r in results]

            assert await whoami(key) == [user, user]
            assert await whoami(other) == [None, None]  # never imported
            for k in (await oslogin.login_profile(ACCOUNT)).keys:
                await oslogin.delete_key(ACCOUNT, k.fingerprint)
            assert await whoami(key) == [None, None]  # deleted from the profile
            await keeper.ensure()
            assert await whoami(key) == [user, user]  # imported again
        finally:
            sshd.stop()
