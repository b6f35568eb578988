"""The emulator's simulated worker hosts, driven by the real SSH client (tpucared.ssh).

Each test creates nodes through the v2 API with an `ssh-keys` metadata entry, pins host keys
from getGuestAttributes as the daemon does, runs commands and detached workloads on the
workers, then preempts / deletes / shuts down and checks on this machine (/proc) that every
process of the node died and its servers stopped answering.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh
import pytest
from emulator_http import Http

from tpucared.emulator import EmulatorServer, running_emulator
from tpucared.emulator.hosts import TAG_HOSTS, SshWorkerHosts, find_tagged
from tpucared.ssh import (
    NO_RETRY,
    CleanupState,
    FileUpload,
    LaunchState,
    RetryPolicy,
    RunState,
    SshErrorKind,
    Target,
    WorkerResult,
    cleanup_script,
    host_keys_from_guest_attributes,
    launch_script,
    parse_cleanup,
    parse_launch,
    parse_probe,
    probe_script,
    run_on_all,
    sh_command,
    ssh_keys_metadata_entry,
    upload,
)

P, Z = "hosts", "us-central2-b"
NODES = f"/v2/projects/{P}/locations/{Z}/nodes"
CONTROL = f"/_emulator/v1/projects/{P}/locations/{Z}/nodes"
USER = "tester"
# The servers come up just after READY (as sshd does after boot): retry refusals, quickly.
FAST_RETRY = RetryPolicy(attempts=50, initial_delay=0.02, max_delay=0.1, jitter=0.0)


def free_port() -> int:
    """A port nothing listens on, on any address (a wildcard bind would fail otherwise)."""
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


def is_dir(path: str) -> bool:
    return Path(path).is_dir()


def read(path: str) -> bytes:
    return Path(path).read_bytes()


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


async def eventually(check: Callable[[], bool], what: str, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
def client_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


@pytest.fixture(scope="module")
def other_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {
        **emulator_options,
        "create_seconds": 0.1,
        "delete_seconds": 0.05,
        "ssh_hosts": True,
        "ssh_port": free_port(),
        "hosts_dir": str(tmp_path / "hosts"),
    }


class Cloud:
    """The v2 and control APIs, as the daemon and a test harness use them."""

    def __init__(self, emulator: EmulatorServer, http: Http, key: asyncssh.SSHKey) -> None:
        self.emulator = emulator
        self.http = http
        self.key = key
        hosts = emulator.worker_hosts
        assert isinstance(hosts, SshWorkerHosts)
        self.hosts = hosts

    async def create(self, node_id: str, accelerator: str = "v4-32", **spec: Any) -> dict[str, Any]:
        metadata = {"ssh-keys": ssh_keys_metadata_entry(USER, self.key)}
        body = {"acceleratorType": accelerator, "runtimeVersion": "tpu-ubuntu2204-base",
                "metadata": metadata, **spec}  # fmt: skip
        await self.http.ok("POST", NODES, body, nodeId=node_id)
        node = await self.wait_state(node_id, "READY")
        # The servers start just after READY, as sshd does after boot.
        addresses = [endpoint["ipAddress"] for endpoint in node["networkEndpoints"]]
        await eventually(lambda: all(listening(a, self.hosts.port) for a in addresses), "up")
        return node

    async def wait_state(self, node_id: str, state: str) -> dict[str, Any]:
        for _ in range(250):
            node: dict[str, Any] = await self.http.ok("GET", f"{NODES}/{node_id}")
            if node["state"] == state:
                return node
            await asyncio.sleep(0.02)
        raise AssertionError(f"{node_id} never became {state}")

    async def targets(self, node_id: str, *, user: str = USER) -> list[Target]:
        """One target per worker, host keys pinned from the guest attributes."""
        node = await self.http.ok("GET", f"{NODES}/{node_id}")
        attributes = await self.http.ok(
            "POST", f"{NODES}/{node_id}:getGuestAttributes", {"queryPath": "hostkeys/"}
        )
        targets = []
        for index, (endpoint, worker) in enumerate(
            zip(node["networkEndpoints"], attributes["guestAttributes"], strict=True)
        ):
            items = [(i["key"], i["value"]) for i in worker["queryValue"]["items"]]
            targets.append(
                Target(
                    worker=index,
                    host=endpoint["ipAddress"],
                    port=self.hosts.port,
                    user=user,
                    pinned_host_keys=host_keys_from_guest_attributes(items),
                    incarnation=node["id"],
                )
            )
        return targets

    async def run(
        self,
        targets: list[Target],
        command: str,
        *,
        key: asyncssh.SSHKey | None = None,
        retry: RetryPolicy = FAST_RETRY,
    ) -> list[WorkerResult]:
        return await run_on_all(
            targets, command, key=key or self.key, retry=retry, connect_timeout=5.0
        )

    async def launch(self, targets: list[Target], run_dir: str, command: str) -> list[int]:
        results = await self.run(targets, sh_command(launch_script(run_dir, command, env={})))
        launched = [parse_launch(r.stdout_tail) for r in results]
        assert all(r.state is LaunchState.STARTED for r in launched), launched
        return [r.pid for r in launched if r.pid is not None]

    async def probe(self, targets: list[Target], run_dir: str) -> list[RunState]:
        results = await self.run(targets, sh_command(probe_script(run_dir)))
        return [parse_probe(r.stdout_tail).state for r in results]

    async def control(self, node_id: str, action: str, body: Any = None) -> Any:
        return await self.http.ok("POST", f"{CONTROL}/{node_id}:{action}", body)


@pytest.fixture
async def cloud(emulator: EmulatorServer, client_key: asyncssh.SSHKey) -> AsyncIterator[Cloud]:
    async with aiohttp.ClientSession() as session:
        yield Cloud(emulator, Http(emulator.url, session), client_key)


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
        running_emulator(create_seconds=0.05, ssh_hosts=True, ssh_port=free_port()) as emulator,
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


# A workload that records the signal it gets and its notice file, then checkpoints for a
# moment and exits 0, as a training script that saves on SIGTERM would.
CHECKPOINTS = (
    'echo "$TPUCARED_PREEMPTION_NOTICE_FILE" > "{out}/file-$TPUCARED_EMULATOR_WORKER"; '
    "trap 'echo TERM > \"{out}/term-$TPUCARED_EMULATOR_WORKER\"; sleep 0.3; exit 0' TERM; "
    "while :; do sleep 0.05; done"
)


async def test_a_notice_signals_every_worker_while_the_node_stays_ready(
    cloud: Cloud, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    await cloud.create("noticed", "v4-16", schedulingConfig={"spot": True})
    targets = await cloud.targets("noticed")
    groups = await cloud.launch(targets, "~/run", CHECKPOINTS.format(out=out))
    await eventually(lambda: len(list(out.glob("file-*"))) == 2, "the workload started")

    node = await cloud.control("noticed", "preempt", {"notice_seconds": 2})
    assert (node["state"], node["notice_at"] is not None) == ("READY", True)
    await eventually(lambda: len(list(out.glob("term-*"))) == 2, "SIGTERM on every worker", 1.5)
    assert (await cloud.http.ok("GET", f"{NODES}/noticed"))["state"] == "READY"

    for _ in range(100):  # the workload checkpoints for 0.3 s, then exits 0
        results = await cloud.run(targets, sh_command(probe_script("~/run")))
        probes = [parse_probe(r.stdout_tail) for r in results]
        if all(p.state is RunState.EXITED for p in probes):
            break
        await asyncio.sleep(0.05)
    assert [(p.state, p.exit_code) for p in probes] == [(RunState.EXITED, 0)] * 2
    assert all(p.notice_at is not None for p in probes)
    notice_files = {(out / f"file-{w}").read_text().strip() for w in range(2)}
    assert all(f.endswith("/run/notice") for f in notice_files)
    # The watcher went with the workload: nothing of the run is left on the workers.
    await eventually(lambda: not any(group_members(g) for g in groups), "the runs' groups ended")
    await cloud.wait_state("noticed", "PREEMPTED")


async def test_without_a_notice_the_watcher_leaves_nothing_behind(cloud: Cloud) -> None:
    await cloud.create("quiet", "v4-8")
    targets = await cloud.targets("quiet")
    (group,) = await cloud.launch(targets, "~/run", "sleep 0.3")
    await eventually(lambda: not group_members(group), "the run and its watcher ended", 5)
    (result,) = await cloud.run(targets, sh_command(probe_script("~/run")))
    probe = parse_probe(result.stdout_tail)
    assert (probe.state, probe.exit_code, probe.notice_at) == (RunState.EXITED, 0, None)


async def test_an_instant_preemption_has_no_notice(cloud: Cloud) -> None:
    await cloud.create("instant", "v4-8")
    node = await cloud.control("instant", "preempt")
    assert (node["state"], node["notice_at"]) == ("PREEMPTED", None)
    with pytest.raises(AssertionError, match="notice_seconds"):
        await cloud.control("instant", "preempt", {"notice_seconds": -1})
