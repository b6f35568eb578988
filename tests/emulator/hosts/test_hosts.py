"""The emulator's simulated worker hosts, driven by the real SSH client (tpucared.ssh).

Each test creates nodes through the v2 API with an `ssh-keys` metadata entry, pins host keys
from getGuestAttributes as the daemon does, runs commands and detached workloads on the
workers, then preempts / deletes / shuts down and checks on this machine (/proc) that every
process of the node died and its servers stopped answering.
"""

from __future__ import annotations

import asyncio

import aiohttp
import asyncssh
import pytest
from emulator_http import Http
from hosts_support import (
    CONTROL,
    FAST_RETRY,
    NODES,
    USER,
    Cloud,
    P,
    Z,
    alive,
    eventually,
    group_members,
    is_dir,
    read,
)

from bench.common import free_port
from tpucared.launch import (
    CleanupState,
    RunState,
    cleanup_script,
    parse_cleanup,
    parse_probe,
    probe_script,
)
from tpucared.ssh import (
    NO_RETRY,
    FileUpload,
    SshErrorKind,
    Target,
    sh_command,
    ssh_keys_metadata_entry,
    upload,
)
from tpucared_emulator import running_emulator
from tpucared_emulator.hosts import TAG_HOSTS, find_tagged


@pytest.fixture(scope="module")
def other_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


async def test_commands_run_on_every_worker_behind_the_published_host_keys(cloud: Cloud) -> None:
    await cloud.create("pod")
    targets = await cloud.targets("pod")
    assert len({t.host for t in targets}) == 4
    assert all(t.host.startswith("127.") and t.host != "127.0.0.1" for t in targets)

    results = await cloud.run(targets, 'echo "$HOME"; echo "$USER $TPUCARED_EMULATOR_WORKER"')
    assert all(r.ok for r in results), results
    homes = [r.stdout_tail.splitlines()[0] for r in results]
    assert len(set(homes)) == 4
    for index, (result, home) in enumerate(zip(results, homes, strict=True)):
        assert home.endswith(f"/worker-{index}/home")
        assert is_dir(home)
        assert result.stdout_tail.splitlines()[1] == f"{USER} {index}"
        # The key the server presented is the one getGuestAttributes published (and pinned).
        assert result.host_key == targets[index].pinned_host_keys[0]

    # Exit status, stderr and death by signal come back as from sshd.
    (failed,) = await cloud.run(targets[:1], "echo oops >&2; exit 3")
    assert (failed.exit_status, failed.stderr_tail) == (3, "oops\n")
    (killed,) = await cloud.run(targets[:1], "kill -9 $$")
    assert (killed.exit_status, killed.exit_signal) == (None, "KILL")

    # Uploads travel over stdin.
    uploaded = await upload(targets, [FileUpload("~/cfg/app.toml", b"x = 1\n", 0o600)],
                            key=cloud.key, retry=FAST_RETRY)  # fmt: skip
    assert all(r.ok for r in uploaded), uploaded
    assert all(read(f"{home}/cfg/app.toml") == b"x = 1\n" for home in homes)

    # Another worker's key pinned for this one: another machine answers, refused.
    swapped = [Target(worker=0, host=targets[0].host, port=targets[0].port, user=USER,
                      pinned_host_keys=targets[1].pinned_host_keys)]  # fmt: skip
    (mismatch,) = await cloud.run(swapped, "true", retry=NO_RETRY)
    assert mismatch.error is SshErrorKind.HOST_KEY_MISMATCH


async def test_shell_sessions_are_refused(cloud: Cloud) -> None:
    await cloud.create("single", "v4-8")
    (target,) = await cloud.targets("single")
    async with asyncssh.connect(
        target.host, target.port, username=USER, client_keys=[cloud.key],
        known_hosts=None, config=None, agent_path=None,
    ) as conn:  # fmt: skip
        shell = await conn.run()
        assert shell.exit_status == 1
        assert "commands only" in str(shell.stderr)


async def test_only_keys_in_the_node_metadata_log_in(
    cloud: Cloud, client_key: asyncssh.SSHKey, other_key: asyncssh.SSHKey
) -> None:
    await cloud.create("locked", "v4-16")
    targets = await cloud.targets("locked")
    assert all(r.ok for r in await cloud.run(targets, "true"))

    refused = await cloud.run(targets, "true", key=other_key, retry=NO_RETRY)
    assert [r.error for r in refused] == [SshErrorKind.AUTH] * 2
    wrong_user = await cloud.run(await cloud.targets("locked", user="mallory"), "true",
                                 retry=NO_RETRY)  # fmt: skip
    assert [r.error for r in wrong_user] == [SshErrorKind.AUTH] * 2

    # A metadata patch takes effect at the next login, for any user it names.
    entries = [ssh_keys_metadata_entry(USER, client_key), ssh_keys_metadata_entry("ops", other_key)]
    await cloud.http.ok("PATCH", f"{NODES}/locked", {"metadata": {"ssh-keys": "\n".join(entries)}},
                        updateMask="metadata")  # fmt: skip
    ops_targets = await cloud.targets("locked", user="ops")
    ops = await cloud.run(ops_targets, "echo $USER", key=other_key, retry=NO_RETRY)
    assert [(r.ok, r.stdout_tail) for r in ops] == [(True, "ops\n")] * 2


async def test_preemption_kills_every_process_of_the_node_and_closes_its_servers(
    cloud: Cloud,
) -> None:
    await cloud.create("spot", schedulingConfig={"spot": True})
    await cloud.create("bystander", "v4-8")
    targets = await cloud.targets("spot")
    pids = await cloud.launch(targets, "~/runs/a", "sleep 300")
    # A workload that drops the tag from its environment still dies with its process group.
    scrubbed = await cloud.launch(targets, "~/runs/b", "env -i sleep 301")
    assert await cloud.probe(targets, "~/runs/a") == [RunState.RUNNING] * 4
    assert all(group_members(pgid) for pgid in scrubbed)
    (bystander,) = await cloud.launch(await cloud.targets("bystander"), "~/runs/a", "sleep 302")
    in_flight = asyncio.create_task(cloud.run(targets, "sleep 30"))
    await asyncio.sleep(0.3)
    node = cloud.emulator.state.node(f"projects/{P}/locations/{Z}/nodes/spot")
    assert node is not None
    disk = cloud.hosts.node_dir(node)
    assert is_dir(str(disk))

    await cloud.control("spot", "preempt")

    await eventually(lambda: not any(alive(pid) for pid in pids), "the workloads died")
    await eventually(lambda: not any(group_members(g) for g in scrubbed), "the groups died")
    assert [r.error for r in await in_flight] == [SshErrorKind.LOST] * 4
    refused = await cloud.run(targets, "true", retry=NO_RETRY)
    assert [r.error for r in refused] == [SshErrorKind.REFUSED] * 4
    await eventually(lambda: not is_dir(str(disk)), "the disk is gone (as a preempted VM's)")
    # Other nodes are untouched.
    assert alive(bystander)
    assert await cloud.probe(await cloud.targets("bystander"), "~/runs/a") == [RunState.RUNNING]


async def test_delete_kills_the_workload_too(cloud: Cloud) -> None:
    await cloud.create("doomed", "v4-16")
    pids = await cloud.launch(await cloud.targets("doomed"), "~/run", "sleep 300")
    assert all(alive(pid) for pid in pids)
    await cloud.http.ok("DELETE", f"{NODES}/doomed")
    await eventually(lambda: not any(alive(pid) for pid in pids), "the workloads died")


async def test_a_stopped_on_demand_vm_keeps_its_disk(cloud: Cloud) -> None:
    await cloud.create("vm", "v2-8")
    (target,) = await cloud.targets("vm")
    (pid,) = await cloud.launch([target], "~/run", "sleep 300")
    await cloud.http.ok("POST", f"{NODES}/vm:stop")
    await cloud.wait_state("vm", "STOPPED")
    await eventually(lambda: not alive(pid), "the workload died")
    await cloud.http.ok("POST", f"{NODES}/vm:start")
    await cloud.wait_state("vm", "READY")
    (probe,) = await cloud.run([target], sh_command(probe_script("~/run")))
    gone = parse_probe(probe.stdout_tail)
    # The run's files survived the stop ("died", not "no-run"); its process did not.
    assert (gone.state, gone.reason) == (RunState.GONE, "died")


async def test_a_wedged_tpu_is_cleared_by_the_cleanup_script(cloud: Cloud) -> None:
    status, _ = await cloud.http("POST", f"{CONTROL}/nope:wedge", {"worker": 0})
    assert status == 404
    await cloud.create("wedged", "v4-16")
    targets = await cloud.targets("wedged")
    status, _ = await cloud.http("POST", f"{CONTROL}/wedged:wedge", {"worker": 2})
    assert status == 400
    held = await cloud.control("wedged", "wedge", {"worker": 1})
    assert alive(held["pid"])
    assert read(held["lockfile"]) == f"{held['pid']}\n".encode()

    script = cleanup_script(None, grace_seconds=1, lockfile=held["lockfile"],
                            device_patterns=[held["device_pattern"]])  # fmt: skip
    (result,) = await cloud.run(targets[1:], sh_command(script))
    cleanup = parse_cleanup(result.stdout_tail)
    assert cleanup.state is CleanupState.CLEAN
    assert (cleanup.holders_killed, cleanup.lockfile) == (1, "removed")
    await eventually(lambda: not alive(held["pid"]), "the holder died")

    # A wedge that is never cleaned dies with the node.
    again = await cloud.control("wedged", "wedge", {"worker": 0})
    await cloud.control("wedged", "terminate")
    await eventually(lambda: not alive(again["pid"]), "the holder died")


async def test_emulator_shutdown_leaves_no_process_and_no_directory(
    client_key: asyncssh.SSHKey,
) -> None:
    async with (
        running_emulator(
            create_seconds=0.05, ssh_hosts=True, ssh_port=free_port("0.0.0.0")
        ) as emulator,
        aiohttp.ClientSession() as session,
    ):
        cloud = Cloud(emulator, Http(emulator.url, session), client_key)
        await cloud.create("a", "v4-16")
        await cloud.create("b", "v4-8")
        pids = await cloud.launch(await cloud.targets("a"), "~/r", "sleep 300")
        pids += await cloud.launch(await cloud.targets("b"), "~/r", "sleep 300 & sleep 301")
        root = cloud.hosts.root
        assert all(alive(pid) for pid in pids)
        assert len(find_tagged({TAG_HOSTS: cloud.hosts.token})) >= 3
    assert not any(alive(pid) for pid in pids)
    assert find_tagged({TAG_HOSTS: cloud.hosts.token}) == []
    assert not is_dir(str(root))


async def test_many_nodes_start_and_stop_quickly(cloud: Cloud) -> None:
    """A fleet's worth of idle hosts: 16 v4-32 slices, 64 SSH servers."""
    names = [f"s{i}" for i in range(16)]
    spec = {"acceleratorType": "v4-32", "runtimeVersion": "tpu-ubuntu2204-base",
            "metadata": {"ssh-keys": ssh_keys_metadata_entry(USER, cloud.key)}}  # fmt: skip
    loop = asyncio.get_running_loop()
    started = loop.time()
    for name in names:
        await cloud.http.ok("POST", NODES, spec, nodeId=name)
    nodes = [n for n in cloud.emulator.state.all_nodes() if n.node_id in names]
    await eventually(lambda: all(cloud.hosts.running(n) for n in nodes), "all hosts started")
    assert loop.time() - started < 5.0  # ~0.2 s here: no per-worker slow path (RSA keys...)
    targets = [t for name in names for t in await cloud.targets(name)]
    results = await cloud.run(targets, "true")
    assert sum(r.ok for r in results) == 64
    for name in names:
        await cloud.http.ok("POST", f"{CONTROL}/{name}:vanish")
    await eventually(lambda: not any(cloud.hosts.running(n) for n in nodes), "all stopped")


async def test_a_command_inherits_none_of_the_emulators_descriptors(cloud: Cloud) -> None:
    """A worker's command holds only its own stdio, as on a VM: none of the emulator's
    listeners, connections or other commands' pipes, nor what the emulator's own parent left
    inheritable (spawning with close_fds=False would leak those: measured, and kept True)."""
    await cloud.create("fds", "v4-16")
    targets = await cloud.targets("fds")
    # sh execs the last command: $$ is ls, whose fd 3 is the directory it lists.
    results = await cloud.run(targets, "ls /proc/$$/fd")
    for result in results:
        assert result.ok, result
        assert sorted(int(fd) for fd in result.stdout_tail.split()) == [0, 1, 2, 3]
