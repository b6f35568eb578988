"""SSH work off the tick (runtime/workload/jobs.py), with the daemon's parts in this process
against the emulator's SSH worker hosts: a slice whose SSH hangs delays nothing but itself,
no probe runs while a slot's launch is in flight (so none taken before it can cause a
second one), a launch on a node that dies is cancelled and the slot recovers, and a stop
during a stuck launch ends cleanly.

Hangs are real: a worker's SSH server is replaced by a socket that accepts connections and
never speaks (the client waits for the SSH banner), and a launch is held up by holding its
run directory's launch lock (`flock`), which the launch script waits up to 60 s for.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from runtime_support import (
    PROJECT,
    ZONE,
    Control,
    hosts_emulator_options,
    query,
)
from workload_harness import ssh_hosts

from bench import daemon_config
from tpucared.config import load_config
from tpucared.core.vocab.actions import DeleteNode
from tpucared.core.workload.actions import LaunchWorkload
from tpucared.gcp import NoAuth
from tpucared.gcp.tpu import TpuClient, TpuCloud
from tpucared.ports.launcher import WorkerLost
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.daemon import Daemon
from tpucared.runtime.reconciler import Tick
from tpucared.runtime.startup import node_template
from tpucared.runtime.workload.jobs import WorkloadJobs
from tpucared.runtime.workload.launchers import guest_attribute_host_keys
from tpucared.runtime.workload.runner import WorkloadRunner
from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head
from tpucared_emulator import EmulatorServer
from tpucared_emulator.hosts import SshWorkerHosts

pytestmark = pytest.mark.timeout(120)

FLEET = "jobs"
RUN = 'echo "$TPUCARED_ATTEMPT" >> "$HOME/attempts"; sleep 300'


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(emulator_options, tmp_path)


def _config(tmp_path: Path, emulator: EmulatorServer, *, size: int, kind: str, poll: str) -> Path:
    config = daemon_config.against_emulator(
        emulator.url,
        daemon_config.fleet(
            FLEET, accelerator_type=kind, size=size, capacity="spot", workload={"run": RUN}
        ),
        poll=poll,
        ssh={"port": emulator.state.options.ssh_port},
    )
    return daemon_config.write(tmp_path / "fleet.toml", config)


@dataclass
class InProcess:
    """The daemon's parts in this process; `ticks` records every tick the loop makes."""

    daemon: Daemon
    store: Store
    emulator: EmulatorServer
    db: Path
    ticks: list[Tick] = field(default_factory=list)

    @property
    def hosts(self) -> SshWorkerHosts:
        return ssh_hosts(self.emulator)

    @property
    def jobs(self) -> WorkloadJobs:
        jobs = self.daemon.workloads
        assert jobs is not None
        return jobs

    def node(self, slot: int) -> Any:
        name = f"projects/{PROJECT}/locations/{ZONE}/nodes/{FLEET}-{slot}"
        node = self.emulator.state.node(name)
        assert node is not None
        return node

    def home(self, slot: int, worker: int) -> Path:
        return self.hosts.home(self.node(slot), worker)

    def attempts_on(self, slot: int, worker: int) -> list[int]:
        path = self.home(slot, worker) / "attempts"
        return [int(x) for x in path.read_text().split()] if path.exists() else []

    def attempts(self, slot: int = 0) -> list[tuple[int, str | None]]:
        rows = query(self.db, "SELECT number, outcome FROM workload_attempts "
                     "WHERE fleet = ? AND slot = ? ORDER BY number", FLEET, slot)  # fmt: skip
        return [(r["number"], r["outcome"]) for r in rows]

    def run_id(self, slot: int = 0) -> str:
        rows = query(self.db, "SELECT run_id FROM slots WHERE fleet = ? AND slot = ?", FLEET, slot)
        return str(rows[0]["run_id"])

    async def tick(self) -> Tick:
        tick = await asyncio.wait_for(self.daemon.reconciler.tick("test"), 5.0)
        self.ticks.append(tick)
        return tick

    async def tick_until(self, check: Callable[[Tick], bool], what: str) -> Tick:
        for _ in range(200):
            tick = await self.tick()
            if check(tick):
                return tick
            await asyncio.sleep(0.05)
        raise AssertionError(f"no tick did {what}")


@contextlib.asynccontextmanager
async def inprocess(
    tmp_path: Path,
    emulator: EmulatorServer,
    *,
    size: int = 1,
    kind: str = "v4-32",
    poll: str = "300ms",
) -> AsyncIterator[InProcess]:
    config = load_config(_config(tmp_path, emulator, size=size, kind=kind, poll=poll))
    await upgrade_to_head(config.daemon.db)
    store = Store.open(config.daemon.db)
    client = TpuClient(config.gcp.endpoint, token_source=NoAuth())
    clouds = {"tpu": TpuCloud(client)}
    template = node_template(config)
    runner = WorkloadRunner.from_config(
        config, store, fetch_host_keys=guest_attribute_host_keys(CloudMap(clouds, []), PROJECT)
    )
    ticks: list[Tick] = []

    async def record(tick: Tick) -> None:  # the loop's ticks (tests that run it)
        ticks.append(tick)

    daemon = Daemon(config, store, clouds, template, workloads=runner, on_tick=record)
    h = InProcess(daemon, store, emulator, tmp_path / "state.db", ticks)
    watcher = asyncio.create_task(h.daemon.watcher.run(h.daemon.stop))
    try:
        yield h
    finally:
        h.daemon.stop.set()
        await watcher
        assert h.daemon.workloads is not None
        await h.daemon.workloads.close()
        await h.daemon.tasks.cancel()
        await runner.close()
        await client.aclose()
        await store.close()


async def eventually(check: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


def launches(ticks: list[Tick]) -> list[LaunchWorkload]:
    return [a for t in ticks for a in t.plan.of(LaunchWorkload)]


@contextlib.contextmanager
def tarpit(hosts: list[str], port: int) -> Iterator[None]:
    """Sockets on `hosts`:`port` that accept TCP connections (the kernel does, into the
    backlog) and never answer: an SSH client waits for the server's banner until it times
    out, as with a machine that is wedged or a firewall that drops replies."""
    socks = []
    try:
        for host in hosts:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
            s.listen(16)
            socks.append(s)
        yield
    finally:
        for s in socks:
            s.close()


@contextlib.contextmanager
def launch_lock(run_dir: Path) -> Iterator[None]:
    """Hold the launch lock of a run directory: the launch script waits for it (flock)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "launch.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


async def test_a_slice_whose_ssh_hangs_does_not_delay_the_tick(
    tmp_path: Path, emulator: EmulatorServer, control: Control
) -> None:
    """Slot 1's workers stop answering SSH (each probe waits out the 10 s connect timeout);
    slot 0's node is preempted meanwhile and deleted within a tick or two. With the probes
    inline in the tick, every tick would wait for slot 1's and the delete would come ~10 s
    late."""
    async with inprocess(tmp_path, emulator, size=2, kind="v4-8") as h:
        stop = h.daemon.stop
        loop = asyncio.create_task(h.daemon.loop.run(stop))

        def running_everywhere() -> bool:
            return all(h.attempts_on(s, 0) == [1] for s in (0, 1)) if _ready(h, 2) else False

        await eventually(running_everywhere, "attempt 1 runs on both slots")
        # Slot 1's worker: its SSH server replaced by one that never answers.
        hung = h.node(1)
        await h.hosts.stop(hung)
        with tarpit([w.ip for w in hung.workers], emulator.state.options.ssh_port):
            await asyncio.sleep(1.0)  # a probe of slot 1 is now stuck connecting
            hung_from = len(h.ticks)
            jobs = h.daemon.workloads
            assert jobs is not None
            assert jobs.busy((FLEET, 1)) == "probe"
            preempted_at = time.monotonic()
            since = (await control.requests())[-1]["time"]
            await control.node_action(f"{FLEET}-0", "preempt")

            async def deleted() -> bool:
                return any(r["method"] == "DELETE" and r["path"].endswith(f"/{FLEET}-0")
                           for r in await control.requests(since))  # fmt: skip

            while not await deleted():
                assert time.monotonic() - preempted_at < 4.0, "the delete waited for slot 1"
                await asyncio.sleep(0.05)
            assert jobs.busy((FLEET, 1)) == "probe"  # still stuck: nobody waited for it
            during = [t.seconds for t in h.ticks[hung_from:]]
            assert during
            assert max(during) < 2.0
        stop.set()
        await loop


async def test_a_worker_that_drops_its_connection_wakes_the_loop_before_the_poll(
    tmp_path: Path, emulator: EmulatorServer, control: Control
) -> None:
    """Poll every 30 s: a preemption closes the workers' SSH servers (their VM goes down),
    the daemon's pooled connections end, the loop wakes, and the node is deleted at once."""
    async with inprocess(tmp_path, emulator, kind="v4-8", poll="30s") as h:
        loop = asyncio.create_task(h.daemon.loop.run(h.daemon.stop))
        await eventually(lambda: _ready(h, 1) and h.attempts_on(0, 0) == [1], "attempt 1 runs")
        await eventually(lambda: h.jobs.busy((FLEET, 0)) is None, "the probe after the launch")
        since = (await control.requests())[-1]["time"]
        preempted_at = time.monotonic()
        await control.node_action(f"{FLEET}-0", "preempt")

        async def deleted() -> bool:
            return any(r["method"] == "DELETE" and r["path"].endswith(f"/{FLEET}-0")
                       for r in await control.requests(since))  # fmt: skip

        while not await deleted():
            assert time.monotonic() - preempted_at < 10.0, "the delete waited for the poll"
            await asyncio.sleep(0.05)
        assert any("ssh connection lost" in t.reason for t in h.ticks)
        h.daemon.stop.set()
        await loop


async def test_the_loss_of_a_connection_to_a_node_already_going_wakes_nothing(
    tmp_path: Path, emulator: EmulatorServer, control: Control
) -> None:
    """Once a plan deletes a node (or finds it DEAD), its VM going down is no news: the loss
    of its connections does not wake the loop. Any other node's still does."""
    async with inprocess(tmp_path, emulator, kind="v4-8", poll="30s") as h:
        loop = asyncio.create_task(h.daemon.loop.run(h.daemon.stop))
        await eventually(lambda: _ready(h, 1) and h.attempts_on(0, 0) == [1], "attempt 1 runs")
        await control.node_action(f"{FLEET}-0", "preempt")

        def deleted() -> list[int]:
            return [a.incarnation_id for t in h.ticks for a in t.plan.of(DeleteNode)]

        await eventually(lambda: deleted() != [], "the tick that deletes the node")
        await asyncio.sleep(0.5)  # the preempted VM's own connection losses are behind us
        lost = h.jobs.runner.on_connection_lost
        assert lost is not None
        before = len(h.ticks)
        lost(WorkerLost(deleted()[0], worker=0, host="10.9.9.9"))
        await asyncio.sleep(1.5)  # past the loop's minimum gap between ticks (1 s)
        assert not any("ssh connection lost" in t.reason for t in h.ticks[before:])
        lost(WorkerLost(deleted()[0] + 1000, worker=0, host="10.9.9.9"))
        await eventually(
            lambda: any("ssh connection lost" in t.reason for t in h.ticks[before:]),
            "the wake for a node not known to be going",
        )
        h.daemon.stop.set()
        await loop


def _ready(h: InProcess, size: int) -> bool:
    rows = query(h.db, "SELECT count(*) AS n FROM nodes WHERE phase = 'ready'")
    return bool(rows) and rows[0]["n"] == size


async def _stuck_launch(h: InProcess) -> tuple[Path, contextlib.ExitStack]:
    """Ticks until slot 0's node is READY and probed, then holds worker 3's launch lock of
    attempt 1 and ticks the launch: workers 0-2 start, worker 3 waits for the lock."""
    await h.tick_until(lambda t: _ready(h, 1), "slot 0 READY")
    jobs = h.daemon.workloads
    assert jobs is not None
    await eventually(lambda: jobs.busy((FLEET, 0)) is None, "the first probe of the node")
    stack = contextlib.ExitStack()
    run_dir = h.home(0, 3) / ".tpucared" / "runs" / h.run_id() / "attempt-1"
    stack.enter_context(launch_lock(run_dir))
    tick = await h.tick()
    assert [a.attempt for a in tick.plan.of(LaunchWorkload)] == [1]
    await eventually(lambda: all(h.attempts_on(0, w) == [1] for w in range(3)),
                     "attempt 1 runs on workers 0-2")  # fmt: skip
    assert h.attempts_on(0, 3) == []
    assert jobs.busy((FLEET, 0)) == "chain"
    return run_dir, stack


async def test_no_probe_runs_during_a_launch_so_none_can_cause_a_second_one(
    tmp_path: Path, emulator: EmulatorServer
) -> None:
    """While worker 3's launch waits, a probe would find workers 0-2 running and worker 3
    without the attempt, which the planner resumes (a second launch); no probe is taken
    while the launch runs, and the ticks go on at once."""
    async with inprocess(tmp_path, emulator) as h:
        _, stack = await _stuck_launch(h)
        with stack:
            for _ in range(15):
                tick = await h.tick()
                assert tick.seconds < 2.0
                assert tick.plan.of(LaunchWorkload) == ()
                assert tick.workloads is not None
                assert tick.workloads.fed == 0
                await asyncio.sleep(0.1)
        # The lock is free: worker 3 starts, the launch ends, a probe sees all four run.
        await eventually(lambda: h.attempts_on(0, 3) == [1], "attempt 1 starts on worker 3")
        jobs = h.daemon.workloads
        assert jobs is not None
        await eventually(lambda: jobs.busy((FLEET, 0)) is None, "the probe after the launch")
        tick = await h.tick()
        assert tick.workloads is not None
        assert tick.workloads.fed == 1
        for _ in range(5):
            tick = await h.tick()
            await asyncio.sleep(0.1)
        assert launches(h.ticks) != []
        assert [a.attempt for a in launches(h.ticks)] == [1]
        assert [h.attempts_on(0, w) for w in range(4)] == [[1]] * 4
        assert h.attempts() == [(1, None)]


async def test_a_launch_on_a_node_that_dies_is_cancelled_and_the_slot_recovers(
    tmp_path: Path, emulator: EmulatorServer, control: Control
) -> None:
    """The node's SSH stops answering after its first probe, so the launch hangs connecting
    (10 s per try, retried) in its pre-launch check; the node is preempted meanwhile. The tick
    that deletes the node cancels the launch at once (without waiting for its retries); the
    check comes before the attempt's record, so no attempt was spent: the new node runs
    attempt 1."""
    async with inprocess(tmp_path, emulator) as h:
        await h.tick_until(lambda t: _ready(h, 1), "slot 0 READY")
        jobs = h.jobs
        await eventually(lambda: jobs.busy((FLEET, 0)) is None, "the first probe of the node")
        node = h.node(0)
        first = (await h.store.load_snapshot()).nodes[(FLEET, 0, 0)].id
        await h.hosts.stop(node)
        with tarpit([w.ip for w in node.workers], emulator.state.options.ssh_port):
            tick = await h.tick()
            assert [a.attempt for a in tick.plan.of(LaunchWorkload)] == [1]
            await asyncio.sleep(0.5)
            assert jobs.busy((FLEET, 0)) == "chain"  # connecting, for 10 s per try
            await control.node_action(f"{FLEET}-0", "preempt")
            tick = await h.tick_until(
                lambda t: t.workloads is not None and t.workloads.cancelled > 0,
                "the launch cancelled",
            )
            assert tick.seconds < 2.0
            await eventually(lambda: jobs.busy((FLEET, 0)) is None, "the launch ended", 2.0)
        # Cancelled in its pre-launch check, before its record: the new node runs attempt 1
        # on every worker.
        for _ in range(200):
            await h.tick()
            now = (await h.store.load_snapshot()).nodes.get((FLEET, 0, 0))
            if now is not None and now.id != first and h.attempts() == [(1, None)]:
                break
            await asyncio.sleep(0.05)
        await eventually(lambda: [h.attempts_on(0, w) for w in range(4)] == [[1]] * 4,
                         "attempt 1 runs on every worker of the new node")  # fmt: skip
        assert [a.attempt for a in launches(h.ticks)] == [1, 1]


async def test_a_stop_during_a_stuck_launch_ends_it_cleanly_after_the_drain(
    tmp_path: Path, emulator: EmulatorServer
) -> None:
    async with inprocess(tmp_path, emulator) as h:
        _, stack = await _stuck_launch(h)
        with stack:
            h.daemon.stop.set()
            started = time.monotonic()
            assert await h.daemon.run(drain_timeout=1.0) == 0
            assert time.monotonic() - started < 10.0
            jobs = h.daemon.workloads
            assert jobs is not None
            assert len(jobs) == 0
        # The attempt stays recorded (intent before the launch): the next run resumes it.
        assert h.attempts() == [(1, None)]
