"""The simulated hosts' parts on their own: ssh-keys parsing, process tags, a failed bind, the
wiring into EmulatorServer and the CLI, and the wedge control action without hosts."""

from __future__ import annotations

import asyncio
import os
import re
import socket
from pathlib import Path

import aiohttp
import asyncssh
import pytest
from emulator_http import Http
from proc_support import group_members

from bench.common import free_port
from tpucared.ssh import NO_RETRY, SshErrorKind, Target, run_on_all, ssh_keys_metadata_entry
from tpucared_emulator import EmulatorOptions, EmulatorServer
from tpucared_emulator.host_hook import NoWorkerHosts
from tpucared_emulator.hosts import (
    TAG_HOSTS,
    TAG_NODE,
    HostStartError,
    SshWorkerHosts,
    authorized_keys,
    find_tagged,
    is_authorized,
)
from tpucared_emulator.hosts.processes import kill_tagged
from tpucared_emulator.server import DEFAULT_SSH_PORT, build_parser
from tpucared_emulator.state import EmulatorState
from tpucared_emulator.topology import parse_accelerator_type

KEY = asyncssh.generate_private_key("ssh-ed25519")
OTHER = asyncssh.generate_private_key("ssh-ed25519")


def blob(key: asyncssh.SSHKey) -> str:
    return str(key.export_public_key("openssh").decode().split()[1])


def test_authorized_keys_reads_entries_like_the_guest_agent() -> None:
    metadata = {
        "ssh-keys": "\n".join(
            [
                ssh_keys_metadata_entry("alice", KEY),
                f'bob:ssh-ed25519 {blob(OTHER)} google-ssh {{"userName":"bob"}}',
                "",
                "no-colon ssh-ed25519 AAAA",
                "carol:ssh-ed25519",  # no key
                "dave:ssh-ed25519 !!!notbase64",
                ":ssh-ed25519 " + blob(KEY),  # no user
            ]
        ),
        "sshKeys": f"erin:ssh-ed25519 {blob(OTHER)}",  # the deprecated key still counts
        "startup-script": "echo hi",
    }
    users = authorized_keys(metadata)
    assert set(users) == {"alice", "bob", "erin"}
    assert users["alice"] == {KEY.public_data}
    assert is_authorized(metadata, "alice", KEY)
    assert not is_authorized(metadata, "alice", OTHER)  # keys are per user
    assert not is_authorized(metadata, "mallory", KEY)
    assert not is_authorized({}, "alice", KEY)
    assert not is_authorized({"ssh-keys": 7}, "alice", KEY)


async def test_find_tagged_sees_the_exec_environment_of_descendants(tmp_path: Path) -> None:
    tags = {TAG_HOSTS: "t" + os.urandom(4).hex(), TAG_NODE: "n"}
    # The shell unsets the tag and backgrounds a child: the shell still shows it (its exec-time
    # environment), the `env -u` child does not, the plain child inherits it.
    script = f"unset {TAG_NODE}; sleep 30 & env -u {TAG_HOSTS} sleep 31 & wait"
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", script, env={**tags, "PATH": os.environ["PATH"]}, start_new_session=True
    )
    try:
        # Until both children have exec'd: a child forked and not yet exec'd still shows the
        # shell's exec-time environment, both tags included (a CI run saw it).
        for _ in range(500):
            settled = find_tagged(tags) == [proc.pid]
            if settled and len(find_tagged({TAG_HOSTS: tags[TAG_HOSTS]})) == 2:  # + sleep 30
                break
            await asyncio.sleep(0.01)
        assert find_tagged(tags) == [proc.pid]
        assert len(find_tagged({TAG_HOSTS: tags[TAG_HOSTS]})) == 2
        assert len(group_members(proc.pid)) == 3
        assert await kill_tagged({TAG_HOSTS: tags[TAG_HOSTS]}) == []
        assert await proc.wait() < 0
        assert find_tagged({TAG_HOSTS: tags[TAG_HOSTS]}) == []
        # The untagged `sleep 31` died with the tagged processes' group.
        for _ in range(200):
            if not group_members(proc.pid):
                break
            await asyncio.sleep(0.01)
        assert group_members(proc.pid) == []
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, 9)
            await proc.wait()
    assert find_tagged(tags, proc=str(tmp_path / "no-proc")) == []


def _listen(address: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen()
    return sock


async def test_a_worker_that_cannot_bind_fails_the_start_but_not_its_peers(tmp_path: Path) -> None:
    port = free_port("0.0.0.0")
    state = EmulatorState()
    spec = {"metadata": {"ssh-keys": ssh_keys_metadata_entry("u", KEY)}}
    node = state.spawn_node("p", "us-central2-b", "n", spec, parse_accelerator_type("v4-16"))
    hosts = SshWorkerHosts(tmp_path, port=port)
    taken = re.escape(node.workers[1].ip)
    with _listen(node.workers[1].ip, port):
        with pytest.raises(HostStartError, match=rf"1 of 2 workers .*{taken}"):
            await hosts.start(node)
        assert hosts.running(node)  # registered anyway, so stop() cleans up
        targets = [Target(worker=w.index, host=w.ip, port=port, user="u") for w in node.workers]
        results = await run_on_all(targets[:1], "true", key=KEY, retry=NO_RETRY)
        assert results[0].ok
        await hosts.stop(node)
    results = await run_on_all(targets[:1], "true", key=KEY, retry=NO_RETRY)
    assert results[0].error is SshErrorKind.REFUSED
    await hosts.close()
    with pytest.raises(RuntimeError, match="closed"):
        await hosts.start(node)


def test_ssh_hosts_are_an_option_of_the_server_and_on_by_default_in_the_cli(
    tmp_path: Path,
) -> None:
    assert isinstance(EmulatorServer(EmulatorOptions()).worker_hosts, NoWorkerHosts)
    options = EmulatorOptions(ssh_hosts=True, ssh_port=2200, hosts_dir=str(tmp_path / "h"))
    server = EmulatorServer(options)
    assert isinstance(server.worker_hosts, SshWorkerHosts)
    assert (server.worker_hosts.port, server.worker_hosts.root) == (2200, tmp_path / "h")

    args = build_parser().parse_args([])
    assert (args.ssh_hosts, args.ssh_port, args.hosts_dir) == (True, DEFAULT_SSH_PORT, None)
    args = build_parser().parse_args(["--no-ssh-hosts", "--ssh-port", "22", "--hosts-dir", "h"])
    assert (args.ssh_hosts, args.ssh_port, args.hosts_dir) == (False, 22, "h")


async def test_wedge_needs_the_ssh_hosts(emulator: EmulatorServer) -> None:
    nodes = "/v2/projects/p/locations/us-central2-b/nodes"
    async with aiohttp.ClientSession() as session:
        http = Http(emulator.url, session)
        await http.ok("POST", nodes, {"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base"},
                      nodeId="n")  # fmt: skip
        control = "/_emulator/v1/projects/p/locations/us-central2-b/nodes/n:wedge"
        status, body = await http("POST", control, {"worker": 0})
        assert (status, body["error"]["status"]) == (400, "FAILED_PRECONDITION")
        status, body = await http("POST", control, {"worker": "0"})
        assert (status, body["error"]["status"]) == (400, "INVALID_ARGUMENT")
        held = "/_emulator/v1/projects/p/locations/us-central2-b/nodes/n/workers/0"
        status, body = await http("POST", f"{held}:hold-accelerator", {"stubborn": True})
        assert (status, body["error"]["status"]) == (400, "FAILED_PRECONDITION")
        for path, payload in ((f"{held}:hold-accelerator", {"stubborn": "yes"}),
                              (f"{held}:release", {}), (held, {})):  # fmt: skip
            status, body = await http("POST", path, payload)
            assert (status, body["error"]["status"]) == (400, "INVALID_ARGUMENT"), path
