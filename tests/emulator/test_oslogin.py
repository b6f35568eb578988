"""The emulator's OS Login: the v1 users API, the metadata server's `oslogin/users`, and workers
that, with `os_login=True`, let in only imported keys as the profile's user and ignore
`ssh-keys` metadata. Driven over HTTP and with the real SSH client (tpucared.ssh)."""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from emulator_http import Http

from bench.common import free_port
from tpucared.ssh import (
    RetryPolicy,
    Target,
    host_keys_from_guest_attributes,
    run_on_all,
    ssh_keys_metadata_entry,
)
from tpucared_emulator import EmulatorServer
from tpucared_emulator.oslogin import posix_username

P, Z = "oslogin-proj", "us-central2-b"
NODES = f"/v2/projects/{P}/locations/{Z}/nodes"
SA = "trainer@oslogin-proj.iam.gserviceaccount.com"
FEW_RETRIES = RetryPolicy(attempts=3, initial_delay=0.02, max_delay=0.05, jitter=0.0)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {
        **emulator_options,
        "create_seconds": 0.1,
        "delete_seconds": 0.05,
        "ssh_hosts": True,
        "ssh_port": free_port("0.0.0.0"),
        "hosts_dir": str(tmp_path / "hosts"),
        "os_login": True,
    }


def public(key: asyncssh.SSHKey, comment: str = "test") -> str:
    algorithm, blob = key.export_public_key("openssh").decode().split()[:2]
    return f"{algorithm} {blob} {comment}"


def test_usernames_are_shaped_like_the_real_ones() -> None:
    sa = posix_username(SA)
    assert re.fullmatch(r"sa_1[0-9]{20}", sa)
    assert posix_username(SA) == sa  # fixed per account
    assert posix_username("other@oslogin-proj.iam.gserviceaccount.com") != sa
    assert posix_username("Alice.Smith@example.com") == "alice_smith_example_com"


async def test_import_returns_the_profile_and_delete_removes_the_key(http: Http) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    line = public(key)
    answer = await http.ok(
        "POST", f"/v1/users/{SA}:importSshPublicKey", {"key": line, "expirationTimeUsec": "9" * 16}
    )
    profile = answer["loginProfile"]
    (account,) = profile["posixAccounts"]
    assert account["primary"] is True
    assert account["username"] == posix_username(SA)
    (fingerprint,) = profile["sshPublicKeys"]
    assert re.fullmatch(r"[0-9a-f]{64}", fingerprint)
    assert profile["sshPublicKeys"][fingerprint]["key"] == line
    assert profile["sshPublicKeys"][fingerprint]["expirationTimeUsec"] == "9" * 16

    again = await http.ok("GET", f"/v1/users/{SA}/loginProfile")
    assert again == profile

    await http.ok("DELETE", f"/v1/users/{SA}/sshPublicKeys/{fingerprint}")
    assert (await http.ok("GET", f"/v1/users/{SA}/loginProfile"))["sshPublicKeys"] == {}
    status, body = await http("DELETE", f"/v1/users/{SA}/sshPublicKeys/{fingerprint}")
    assert status == 404
    assert body["error"]["status"] == "NOT_FOUND"


async def test_bad_requests_are_invalid_argument(http: Http) -> None:
    for body in ({"key": "ssh-ed25519 not-base64!"}, {}, {"key": "x", "expirationTimeUsec": "y"}):
        status, answer = await http("POST", f"/v1/users/{SA}:importSshPublicKey", body)
        assert (status, answer["error"]["status"]) == (400, "INVALID_ARGUMENT"), body
    status, answer = await http("GET", "/v1/users/not-an-email/loginProfile")
    assert status == 400


async def test_expired_keys_leave_the_profile(http: Http, emulator: EmulatorServer) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    past = int((emulator.state.now() - 1) * 1_000_000)
    await http.ok(
        "POST",
        f"/v1/users/{SA}:importSshPublicKey",
        {"key": public(key), "expirationTimeUsec": past},
    )
    assert (await http.ok("GET", f"/v1/users/{SA}/loginProfile"))["sshPublicKeys"] == {}


async def test_the_metadata_server_answers_by_username(http: Http) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    await http.ok("POST", f"/v1/users/{SA}:importSshPublicKey", {"key": public(key)})
    url = http.base + "/computeMetadata/v1/oslogin/users"
    user = posix_username(SA)
    async with http.session.get(url, params={"username": user}) as response:
        assert response.status == 403  # no Metadata-Flavor header
    headers = {"Metadata-Flavor": "Google"}
    async with http.session.get(url, params={"username": user}, headers=headers) as response:
        assert response.status == 200
        (profile,) = (await response.json())["loginProfiles"]
    assert profile["posixAccounts"][0]["username"] == user
    async with http.session.get(url, params={"username": "nobody"}, headers=headers) as response:
        assert response.status == 404


async def test_enforced_workers_take_imported_keys_only(
    http: Http, emulator: EmulatorServer
) -> None:
    user = posix_username(SA)
    imported = asyncssh.generate_private_key("ssh-ed25519")
    in_metadata = asyncssh.generate_private_key("ssh-ed25519")
    # The node's ssh-keys name `in_metadata` for the OS Login user itself: still refused.
    body = {
        "acceleratorType": "v4-16",
        "runtimeVersion": "tpu-ubuntu2204-base",
        "metadata": {"ssh-keys": ssh_keys_metadata_entry(user, in_metadata)},
    }
    await http.ok("POST", NODES, body, nodeId="enforced")
    targets = await _targets_when_up(http, emulator, user)

    async def whoami(key: asyncssh.SSHKey, targets: list[Target]) -> list[str | None]:
        results = await run_on_all(
            targets, 'echo "$USER"', key=key, retry=FEW_RETRIES, connect_timeout=5.0
        )
        return [r.stdout_tail.strip() if r.completed else None for r in results]

    assert await whoami(in_metadata, targets) == [None, None]
    await http.ok("POST", f"/v1/users/{SA}:importSshPublicKey", {"key": public(imported)})
    assert await whoami(imported, targets) == [user, user]
    # The same key as another user: refused.
    other = [replace(t, user="root") for t in targets]
    assert await whoami(imported, other) == [None, None]
    # Deleted from the profile: refused from the next login on.
    profile = await http.ok("GET", f"/v1/users/{SA}/loginProfile")
    for fingerprint in profile["sshPublicKeys"]:
        await http.ok("DELETE", f"/v1/users/{SA}/sshPublicKeys/{fingerprint}")
    assert await whoami(imported, targets) == [None, None]


async def _targets_when_up(http: Http, emulator: EmulatorServer, user: str) -> list[Target]:
    for _ in range(250):
        node = await http.ok("GET", f"{NODES}/enforced")
        if node["state"] == "READY":
            break
        await asyncio.sleep(0.02)
    attributes = await http.ok(
        "POST", f"{NODES}/enforced:getGuestAttributes", {"queryPath": "hostkeys/"}
    )
    port = emulator.options.ssh_port
    out = []
    for index, (endpoint, worker) in enumerate(
        zip(node["networkEndpoints"], attributes["guestAttributes"], strict=True)
    ):
        items = [(i["key"], i["value"]) for i in worker["queryValue"]["items"]]
        out.append(
            Target(
                worker=index,
                host=endpoint["ipAddress"],
                port=port,
                user=user,
                pinned_host_keys=host_keys_from_guest_attributes(items),
                incarnation=node["id"],
            )
        )
    # The servers come up just after READY.
    for _ in range(250):
        if all(_listening(t.host, port) for t in out):
            return out
        await asyncio.sleep(0.02)
    raise AssertionError("the workers' SSH servers never came up")


def _listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0
