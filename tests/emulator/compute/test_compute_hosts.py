"""Every RUNNING Compute Engine instance is a simulated worker host, as a one-worker TPU node
is: SSH at its networkIP with the keys of its `ssh-keys` metadata and the host key its guest
attributes publish, a metadata server with the worker id and the preemption notice, and
nothing left running once it is preempted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncssh
import pytest
from compute_support import CONTROL, FAST_RETRY, METADATA, USER, ZONE, running, wait_status
from emulator_http import Http

from bench.common import free_port
from tpucared.ssh import (
    RetryPolicy,
    Target,
    WorkerResult,
    host_keys_from_guest_attributes,
    run_on_all,
    ssh_keys_metadata_entry,
)
from tpucared_emulator import EmulatorServer


@pytest.fixture(scope="module")
def client_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**emulator_options, "ssh_hosts": True, "ssh_port": free_port("0.0.0.0"),
            "hosts_dir": str(tmp_path / "hosts")}  # fmt: skip


async def vm_with_keys(
    emulator: EmulatorServer, http: Http, name: str, key: asyncssh.SSHKey, **kwargs: Any
) -> Target:
    items = [{"key": "ssh-keys", "value": ssh_keys_metadata_entry(USER, key)},
             {"key": "enable-guest-attributes", "value": "TRUE"}]  # fmt: skip
    vm = await running(http, name, metadata={"items": items}, **kwargs)
    attributes = await http.ok(
        "GET", f"{ZONE}/instances/{name}/getGuestAttributes", queryPath="hostkeys/"
    )
    pairs = [(i["key"], i["value"]) for i in attributes["queryValue"]["items"]]
    return Target(
        worker=0,
        host=vm["networkInterfaces"][0]["networkIP"],
        port=emulator.options.ssh_port,
        user=USER,
        pinned_host_keys=host_keys_from_guest_attributes(pairs),
        incarnation=vm["id"],
    )


async def run(target: Target, command: str, key: asyncssh.SSHKey) -> WorkerResult:
    [result] = await run_on_all([target], command, key=key, retry=FAST_RETRY, connect_timeout=5.0)
    return result


async def test_a_running_vm_is_an_ssh_host_with_its_metadata(
    emulator: EmulatorServer, http: Http, client_key: asyncssh.SSHKey
) -> None:
    target = await vm_with_keys(emulator, http, "vm-0", client_key)
    result = await run(target, "echo hello from $USER", client_key)
    assert result.ok, result
    assert result.stdout_tail == f"hello from {USER}\n"
    worker_id = await run(target, METADATA + "attributes/agent-worker-number", client_key)
    assert worker_id.stdout_tail.strip() == "0"
    env = await run(target, METADATA + "attributes/tpu-env", client_key)
    assert "WORKER_ID: '0'" in env.stdout_tail
    preempted = await run(target, METADATA + "preempted", client_key)
    assert preempted.stdout_tail.strip() == "FALSE"
    # A key not in its ssh-keys metadata does not log in.
    stranger = await run_on_all([target], "true", key=asyncssh.generate_private_key("ssh-ed25519"),
                                retry=RetryPolicy(attempts=1), connect_timeout=5.0)  # fmt: skip
    assert not stranger[0].ok


async def test_a_notice_on_its_metadata_then_the_host_goes_with_the_preemption(
    emulator: EmulatorServer, http: Http, client_key: asyncssh.SSHKey
) -> None:
    target = await vm_with_keys(emulator, http, "vm-0", client_key, action="DELETE")
    # Long enough for an SSH round trip on a loaded machine; then preempted.
    await http.ok("POST", f"{CONTROL}/vm-0:preempt", {"notice_seconds": 2.0})
    preempted = await run(target, METADATA + "preempted", client_key)
    assert preempted.stdout_tail.strip() == "TRUE"
    assert (await http.ok("GET", f"{ZONE}/instances/vm-0"))["status"] == "RUNNING"
    await wait_status(http, "vm-0", None)
    gone = await run_on_all([target], "true", key=client_key, retry=RetryPolicy(attempts=1),
                            connect_timeout=2.0)  # fmt: skip
    assert gone[0].error is not None


async def test_the_worker_id_keys_are_an_option(
    emulator: EmulatorServer, http: Http, client_key: asyncssh.SSHKey
) -> None:
    emulator.compute.options.compute_worker_id_source = "none"
    target = await vm_with_keys(emulator, http, "vm-0", client_key)
    listing = await run(target, METADATA + "attributes/", client_key)
    assert sorted(listing.stdout_tail.split()) == ["enable-guest-attributes", "ssh-keys"]
