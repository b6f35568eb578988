"""OS Login end to end: the real daemon against an emulator that enforces OS Login.

The daemon imports its key through the emulator's OS Login API, deletes its own stale key (a
rotated one) and keeps another daemon's, creates its node with `enable-oslogin` and no
`ssh-keys`, and runs the workload on every worker as the login profile's user (`sa_...`);
`tpucared exec` logs in the same way beside it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from runtime_support import OWNER, PROJECT, SLOW, Rig, hosts_emulator_options, wait_for

from tpucared.runtime.startup import public_key_line
from tpucared_emulator.oslogin import posix_username

pytestmark = pytest.mark.timeout(240)

FLEET = "pod"
WORKERS = 2
ACCOUNT = f"tpucared@{PROJECT}.iam.gserviceaccount.com"
RUN = 'echo "$USER" > "$RESULTS/user-$TPUCARED_WORKER"; sleep 600'


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(emulator_options, tmp_path, os_login=True)


async def test_the_daemon_logs_in_through_os_login(rig: Rig) -> None:
    emulator, control, results = rig.emulator, rig.control, rig.results
    config = rig.config(
        fleet=FLEET, accelerator_type="v4-16", run=RUN,
        ssh=f'os_login = true\nos_login_account = "{ACCOUNT}"',
    )  # fmt: skip
    registry = emulator.os_login
    stale, others = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    registry.import_key(ACCOUNT, {"key": public_key_line(stale, OWNER)})
    registry.import_key(ACCOUNT, {"key": public_key_line(others, "another-daemon")})

    await rig.daemons(config).start()
    user = posix_username(ACCOUNT)

    def users() -> list[str]:
        files = [results / f"user-{w}" for w in range(WORKERS)]
        return [f.read_text().strip() if f.exists() else "" for f in files]

    async def ran_as_the_profiles_user() -> bool:
        return users() == [user] * WORKERS

    await wait_for(ran_as_the_profiles_user, SLOW, "the workload on every worker as sa_...")

    (node,) = [n["node"] for n in await control.nodes()]
    assert node["metadata"].get("enable-oslogin") == "TRUE"
    assert "ssh-keys" not in node["metadata"]

    keys = registry.login_profile(ACCOUNT)["sshPublicKeys"].values()
    comments = sorted(k["key"].split()[2] for k in keys)
    assert comments == ["tpucared:another-daemon", f"tpucared:{OWNER}"]  # the stale one went
    ours = next(k for k in keys if k["key"].endswith(f"tpucared:{OWNER}"))
    assert "expirationTimeUsec" in ours
    assert ours["key"].split()[1] != public_key_line(stale, OWNER).split()[1]

    # A person's `tpucared exec` logs in as the same user.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tpucared", "exec", "-c", str(config), f"{FLEET}/0",
        "--", "echo $USER",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert sorted(out.decode().splitlines()) == [f"{FLEET}/0/{w}: {user}" for w in range(WORKERS)]
