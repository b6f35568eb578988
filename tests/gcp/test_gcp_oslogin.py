"""The OS Login client and the daemon's key keeper, against the emulator over loopback: the
import gives the username, our stale keys go and others' stay, renewals keep the key alive
past its first expiry, and errors are classified and retried like the TPU API's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh
import pytest

from bench import daemon_config
from tpucared.config import load_config
from tpucared.core.model.specs import ErrorKind
from tpucared.gcp import ApiError, NoAuth, RetryPolicy
from tpucared.gcp.tpu import TpuClient
from tpucared.gcp.tpu.oslogin import OSLOGIN_ENDPOINT, OsLoginClient, endpoint_for
from tpucared.runtime.clock import SystemClock
from tpucared.runtime.errors import StartupError
from tpucared.runtime.oslogin import OsLoginKeeper, account_of, start_os_login
from tpucared.runtime.startup import public_key_line
from tpucared_emulator import EmulatorServer
from tpucared_emulator.oslogin import posix_username

SA = "tpucared@oslogin-proj.iam.gserviceaccount.com"
OWNER = "lab"
QUICK = RetryPolicy(max_attempts=4, base=0.01, cap=0.02)


@pytest.fixture
def client_options() -> dict[str, Any]:
    return {"retry": QUICK}


async def _faults(emulator: EmulatorServer, config: dict[str, Any]) -> None:
    async with (
        aiohttp.ClientSession() as s,
        s.put(emulator.url + "/_emulator/v1/faults", json=config) as r,
    ):
        assert r.status == 200, await r.text()


def _key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


def test_the_endpoint_is_googles_unless_the_tpu_api_is_an_emulator() -> None:
    assert endpoint_for("https://tpu.googleapis.com") == OSLOGIN_ENDPOINT
    assert endpoint_for("http://127.0.0.1:8471") == "http://127.0.0.1:8471"


async def test_the_keeper_imports_and_drops_only_its_own_stale_keys(
    client: TpuClient, emulator: EmulatorServer
) -> None:
    oslogin = OsLoginClient(client, emulator.url)
    old, someone_elses, current = _key(), _key(), _key()
    await oslogin.import_key(SA, public_key_line(old, OWNER), expires=None)
    await oslogin.import_key(SA, public_key_line(someone_elses, "other-owner"), expires=None)
    keeper = OsLoginKeeper(oslogin, SA, public_key_line(current, OWNER), SystemClock())

    assert await keeper.ensure() == posix_username(SA)

    profile = await oslogin.login_profile(SA)
    lines = sorted(k.key for k in profile.keys)
    assert lines == sorted(
        [public_key_line(current, OWNER), public_key_line(someone_elses, "other-owner")]
    )
    ours = next(k for k in profile.keys if k.comment == f"tpucared:{OWNER}")
    assert keeper.expires is not None
    assert ours.expires_usec == int(keeper.expires.timestamp() * 1_000_000)


async def test_renewals_keep_the_key_past_its_first_expiry(
    client: TpuClient, emulator: EmulatorServer
) -> None:
    oslogin = OsLoginClient(client, emulator.url)
    key = _key()
    keeper = OsLoginKeeper(oslogin, SA, public_key_line(key, OWNER), SystemClock(), ttl=0.6)
    await keeper.ensure()
    stop = asyncio.Event()
    task = asyncio.create_task(keeper.run(stop))
    await asyncio.sleep(1.5)  # 2.5 lives of the first import
    stop.set()
    await asyncio.wait_for(task, 5)
    assert keeper.renewals >= 3
    (live,) = (await oslogin.login_profile(SA)).keys  # still there, never expired
    assert live.blob == public_key_line(key, OWNER).split()[1]


async def test_a_keeper_whose_key_lapsed_is_refused_by_the_emulator(
    client: TpuClient, emulator: EmulatorServer
) -> None:
    """The control for the test above: without renewals the key does expire."""
    oslogin = OsLoginClient(client, emulator.url)
    keeper = OsLoginKeeper(oslogin, SA, public_key_line(_key(), OWNER), SystemClock(), ttl=0.2)
    await keeper.ensure()
    await asyncio.sleep(0.4)
    assert (await oslogin.login_profile(SA)).keys == ()


async def test_errors_are_retried_or_classified(
    client: TpuClient, emulator: EmulatorServer
) -> None:
    oslogin = OsLoginClient(client, emulator.url)
    line = public_key_line(_key(), OWNER)
    await _faults(
        emulator,
        {"script": [{"kind": "unavailable"}, {"kind": "rate_limited"}], "retry_after_s": 0},
    )
    profile = await oslogin.import_key(SA, line, expires=None)  # retried twice, then done
    assert profile.username == posix_username(SA)
    assert client.request_counts[("oslogin.importSshPublicKey", "503")] == 1
    assert client.request_counts[("oslogin.importSshPublicKey", "429")] == 1

    await _faults(emulator, {"script": [{"kind": "permission"}]})
    with pytest.raises(ApiError) as refused:
        await oslogin.import_key(SA, line, expires=None)
    assert refused.value.kind is ErrorKind.PERMISSION

    with pytest.raises(ApiError) as bad:
        await oslogin.import_key(SA, "ssh-ed25519 not-a-key", expires=None)
    assert bad.value.kind is ErrorKind.INVALID


def _config(tmp_path: Path, endpoint: str, ssh: str) -> Any:
    config = daemon_config.against_emulator(
        endpoint,
        project="oslogin-proj",
        owner=OWNER,
        daemon={"poll_interval": None, "http": None},
        ssh=None,
        more=f"[ssh]\n{ssh}",
    )
    return load_config(daemon_config.write(tmp_path / "c.toml", config))


async def test_start_refuses_with_one_line_what_a_person_must_fix(
    tmp_path: Path, client: TpuClient, emulator: EmulatorServer
) -> None:
    key = public_key_line(_key(), OWNER)
    clock = SystemClock()
    oslogin = OsLoginClient(client, emulator.url)
    # No account: the emulator's credentials ("none") name none.
    config = _config(tmp_path, emulator.url, "os_login = true")
    with pytest.raises(StartupError, match=r"set ssh\.os_login_account"):
        await account_of(config, NoAuth())

    config = _config(tmp_path, emulator.url, f'os_login = true\nos_login_account = "{SA}"')
    await _faults(emulator, {"script": [{"kind": "permission"}]})
    with pytest.raises(StartupError) as refused:
        await start_os_login(config, oslogin, NoAuth(), key, clock)
    message = str(refused.value)
    assert "ssh.os_login" in message
    assert "roles/compute.osAdminLogin" in message
    assert "\n" not in message

    keeper = await start_os_login(config, oslogin, NoAuth(), key, clock)
    assert keeper.username == posix_username(SA)
