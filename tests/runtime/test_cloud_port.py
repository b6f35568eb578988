"""The Cloud port's seam (tpucared/ports/cloud.py): a second, in-test cloud keeps a slot alive.

`FakeCloud` is a plain object keeping nodes in a dict, with state names and a state table of
its own (no HTTP, no TPU API anywhere: the daemon's map holds only it, under api "fake"). Its
nodes' workers are the emulator's simulated SSH hosts (emulator/tpucared_emulator/hosts),
started when a node comes up and stopped when it is preempted or deleted, so the real workload
runner launches over real SSH. The real daemon (`Daemon.run`, its loop, planner, executor, cloud
calls, operation watcher and workload jobs) creates the slot's node, launches the workload,
sees the node PREEMPTED, deletes it, creates it again and relaunches with the next
TPUCARED_ATTEMPT.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import pytest
from runtime_support import PROJECT, free_port, query, wait_for, write_config
from workload_harness import daemon_in_process

from tpucared.config import load_config
from tpucared.core.model.abilities import NO_ABILITIES
from tpucared.core.model.observed import ObservedNode, StateClass, WorkerEndpoint, ZoneObservation
from tpucared.core.model.specs import ErrorKind
from tpucared.ports.cloud import CloudError, NodeShape, OperationState, PublishedHostKeys
from tpucared.runtime.daemon import Daemon
from tpucared_emulator.hosts import SshWorkerHosts
from tpucared_emulator.resources import Node
from tpucared_emulator.topology import parse_accelerator_type
from tpucared_emulator.workers import LoopbackAllocator, Worker

pytestmark = pytest.mark.timeout(90)

FLEET = "fake"
RUN = 'echo "$TPUCARED_ATTEMPT" >> "$HOME/attempts"; sleep 300'

# The fake's own states, and what each means to the core (its one table).
STATES = {
    "PROVISIONING": (StateClass.CREATING, "creating"),
    "RUNNING": (StateClass.USABLE, None),
    "PREEMPTED": (StateClass.DEAD, None),
    "DELETING": (StateClass.DELETING, None),
}


@dataclass
class FakeNode:
    zone: str
    name: str
    shape: NodeShape
    vm: Node  # the emulator's record its simulated worker hosts run for
    state: str = "PROVISIONING"


@dataclass
class FakeCloud:
    """A Cloud port over a dict; every operation is done as soon as it is started."""

    hosts: SshWorkerHosts
    nodes: dict[tuple[str, str], FakeNode] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _addresses: LoopbackAllocator = field(default_factory=LoopbackAllocator)

    oslogin = None
    abilities = NO_ABILITIES

    async def observe(
        self, project: str, zone: str, now: datetime, *, queued_resources: bool
    ) -> ZoneObservation:
        for key, node in list(self.nodes.items()):  # the cloud moves on between lists
            if node.zone != zone:
                continue
            if node.state == "PROVISIONING":
                node.state = node.vm.state = "RUNNING"
                await self.hosts.start(node.vm)
            elif node.state == "DELETING":
                del self.nodes[key]
        listed = tuple(self._observed(n) for n in self.nodes.values() if n.zone == zone)
        return ZoneObservation(zone=zone, observed_at=now, nodes=listed)

    def _observed(self, node: FakeNode) -> ObservedNode:
        cls, rule = STATES[node.state]
        ip = node.vm.workers[0].ip
        return ObservedNode(
            name=node.name,
            zone=node.zone,
            state=node.state,
            state_class=cls,
            stuck_rule=rule,
            accelerator_type=node.shape.accelerator_type,
            labels=dict(node.shape.labels),
            cloud_id=str(node.vm.uid),
            endpoints=(WorkerEndpoint(0, ip, ip),),
        )

    async def create(
        self,
        project: str,
        zone: str,
        name: str,
        shape: NodeShape,
        *,
        queued: str | None = None,
        slices: int = 1,
        reservation: str | None = None,
    ) -> OperationState:
        self.calls.append(f"create {name}")
        if (zone, name) in self.nodes:
            raise CloudError(f"{name} exists", ErrorKind.ALREADY_EXISTS)
        uid = next(self._ids)
        vm = Node(
            project=project,
            zone=zone,
            node_id=name,
            spec={"metadata": dict(shape.metadata), "schedulingConfig": {"spot": True}},
            shape=parse_accelerator_type(shape.accelerator_type),
            uid=uid,
            create_time=0.0,
            workers=[Worker(0, self._addresses.allocate())],
        )
        self.nodes[(zone, name)] = FakeNode(zone, name, shape, vm)
        return OperationState(name=f"create-{uid}", done=True, verb="create")

    async def delete(
        self, project: str, zone: str, name: str, *, queued: str | None = None
    ) -> OperationState:
        self.calls.append(f"delete {name}")
        node = self.nodes.get((zone, name))
        if node is None:
            raise CloudError(f"{name} is gone", ErrorKind.NOT_FOUND)
        node.state = "DELETING"
        await self.hosts.stop(node.vm)
        return OperationState(name=f"delete-{node.vm.uid}", done=True, verb="delete")

    async def poll(self, operation: str) -> OperationState:
        return OperationState(name=operation, done=True)

    async def host_keys(self, project: str, zone: str, name: str) -> PublishedHostKeys:
        node = self.nodes[(zone, name)]
        return {w.index: list(w.host_keys().items()) for w in node.vm.workers}

    async def start_maintenance(self, project: str, zone: str, name: str) -> OperationState:
        raise CloudError("this cloud announces no maintenance", ErrorKind.INVALID)

    async def aclose(self) -> None:
        await self.hosts.close()

    async def preempt(self, name: str) -> None:
        """What a spot VM's preemption looks like from here: its workers go down."""
        node = next(n for n in self.nodes.values() if n.name == name)
        node.state = node.vm.state = "PREEMPTED"
        await self.hosts.stop(node.vm)

    def attempts(self, name: str) -> list[int]:
        """TPUCARED_ATTEMPT of each launch on the node's current worker."""
        node = next(n for n in self.nodes.values() if n.name == name)
        path = self.hosts.home(node.vm, 0) / "attempts"
        return [int(x) for x in path.read_text().split()] if path.exists() else []


@contextlib.asynccontextmanager
async def daemon_on(
    cloud: FakeCloud, tmp_path: Path, *, api: str = "fake", fleet: str = FLEET
) -> AsyncIterator[Daemon]:
    """The real daemon over `cloud` alone, registered under `api`, for one slot of `fleet`
    with a workload."""
    path = write_config(
        tmp_path,
        "http://127.0.0.1:9",  # no TPU API in this test: nothing may call it
        size=1,
        fleet=fleet,
        poll="200ms",
        workload={"run": RUN},
    )
    config = load_config(path)
    config = replace(
        config,
        ssh=replace(config.ssh, port=cloud.hosts.port),
        fleets=tuple(replace(f, api=api) for f in config.fleets),
    )
    # The registration: the daemon's clouds, by api.
    async with daemon_in_process(config, {api: cloud}, PROJECT) as daemon:
        yield daemon


async def relaunched_after(
    daemon: Daemon, cloud: FakeCloud, node: str, lose: Callable[[str], Awaitable[None]]
) -> None:
    """Run `daemon` until `node`'s first launch, `lose` the node, and wait for attempt 2 on
    its replacement; then stop the daemon, which must end well."""
    run = asyncio.create_task(daemon.run(drain_timeout=2.0))

    async def launched(attempt: int) -> bool:
        assert not run.done(), "the daemon stopped"
        listed = any(n.name == node for n in cloud.nodes.values())
        return listed and cloud.attempts(node) == [attempt]

    await wait_for(lambda: launched(1), 30, "the first launch")
    await lose(node)
    await wait_for(lambda: launched(2), 30, "the relaunch on the new node")
    daemon.stop.set()
    assert await run == 0


async def test_the_daemon_keeps_a_slot_alive_on_a_second_cloud(tmp_path: Path) -> None:
    cloud = FakeCloud(SshWorkerHosts(tmp_path / "hosts", port=free_port()))
    node = f"{FLEET}-0"
    try:
        async with daemon_on(cloud, tmp_path) as daemon:
            await relaunched_after(daemon, cloud, node, cloud.preempt)
    finally:
        await cloud.aclose()

    assert cloud.calls == [f"create {node}", f"delete {node}", f"create {node}"]
    db = tmp_path / "state.db"
    rows = query(db, "SELECT end_reason FROM nodes WHERE fleet = ? ORDER BY id", FLEET)
    assert [r["end_reason"] for r in rows] == ["preempted", None]
    attempts = query(
        db, "SELECT number FROM workload_attempts WHERE fleet = ? ORDER BY number", FLEET
    )
    assert [r["number"] for r in attempts] == [1, 2]
