"""Helpers (no tests) for the workload tests: one fleet's slices on the emulator's SSH hosts.

`Harness.tick()` is the daemon's tick for these tests: list the zone, read the store, probe
the workers (`WorkloadRunner.probe`), plan (`core.workload_tick.plan_tick`: the node planner
and the workload planner), then carry out the node actions with `apply_node_actions` (a
minimal stand-in for the daemon's executor, enough for adopting, transitions and deletes) and
the workload actions with the real runner. Named test_workload* to stay among the files of
the workload work; pytest collects nothing from it. `daemon_in_process`: the real daemon in
this process over the clouds a test gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncssh
from proc_support import alive, listening  # noqa: F401 (alive: for the tests that import it here)

from bench.common import free_port
from tpucared.config import Config, SshConfig
from tpucared.core.model.backoff import BackoffRule
from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import SlotRecord, WorkloadAttemptRecord
from tpucared.core.model.specs import (
    FLEET_LABEL,
    OWNER_LABEL,
    CapacityKind,
    FleetSpec,
    WorkloadSpec,
)
from tpucared.core.planning.tick import plan_tick
from tpucared.core.vocab.actions import (
    Action,
    Adopt,
    CreateNode,
    DeleteNode,
    Notice,
    OpenSlot,
    RecordCloud,
    RecordFleet,
    Transition,
)
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.core.workload.planner import WorkloadPolicy
from tpucared.gcp.auth import load_token_source
from tpucared.gcp.errors import ApiError
from tpucared.gcp.tpu import TpuClient, TpuCloud
from tpucared.gcp.tpu.bodies import NodeShape
from tpucared.gcp.tpu.convert import node_from_json
from tpucared.ports.cloud import Clouds
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.daemon import Daemon
from tpucared.runtime.startup import node_template
from tpucared.runtime.workload.hosts import HostKeyFetcher
from tpucared.runtime.workload.launchers import guest_attribute_host_keys, ssh_launcher
from tpucared.runtime.workload.runner import WorkloadRunner
from tpucared.ssh import ssh_keys_metadata_entry
from tpucared.store import KEEP, Store, Tx
from tpucared.store.migrate import upgrade_to_head
from tpucared_emulator import EmulatorServer
from tpucared_emulator.hosts import SshWorkerHosts

PROJECT, ZONE, OWNER, USER = "wl-project", "us-central2-b", "tests", "tpucared"
FLEET = "sweep"
# Relaunch a crashed slice after 1 ms instead of 10 s; everything else as in production.
FAST = WorkloadPolicy(
    crash_backoff=BackoffRule(timedelta(milliseconds=1), timedelta(milliseconds=1))
)


async def eventually(check: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


def fleet(workload: WorkloadSpec, size: int = 1) -> FleetSpec:
    return FleetSpec(
        name=FLEET,
        zones=(ZONE,),
        accelerator_type="v4-32",
        extra={"runtime_version": "tpu-ubuntu2204-base"},
        size=size,
        workload=workload,
    )


def ssh_hosts(emulator: EmulatorServer) -> SshWorkerHosts:
    """The emulator's worker hosts, which these tests start as SSH hosts."""
    hosts = emulator.worker_hosts
    assert isinstance(hosts, SshWorkerHosts)
    return hosts


@dataclass
class Harness:
    emulator: EmulatorServer
    client: TpuClient
    store: Store
    key: asyncssh.SSHKey
    specs: list[FleetSpec]
    runner: WorkloadRunner = None  # type: ignore[assignment]  # set by `harnesses`
    policy: WorkloadPolicy = FAST
    reported: frozenset[str] = frozenset()

    @property
    def hosts(self) -> SshWorkerHosts:
        return ssh_hosts(self.emulator)

    @property
    def ssh(self) -> SshConfig:
        return ssh_config(self.hosts.port)

    def new_runner(self, *, fetch: HostKeyFetcher | None = None,
                   environ: Mapping[str, str] | None = None) -> WorkloadRunner:  # fmt: skip
        launcher = ssh_launcher(self.store, self.ssh, self.key, fetch_host_keys=fetch)
        return WorkloadRunner(self.store, self.specs, launcher, environ=environ or {})

    # -- the cloud ------------------------------------------------------------------------------

    async def create_node(self, slot: int = 0) -> None:
        """A node of the fleet with our labels and key, as the daemon creates it; the node
        planner adopts it at the next tick."""
        name = f"{FLEET}-{slot}"
        await self.client.create_node(
            PROJECT,
            ZONE,
            name,
            NodeShape(
                accelerator_type=self.specs[0].accelerator_type,
                extra={"runtime_version": "tpu-ubuntu2204-base"},
                capacity=CapacityKind.SPOT,
                labels={FLEET_LABEL: FLEET, OWNER_LABEL: OWNER},
                metadata={"ssh-keys": ssh_keys_metadata_entry(USER, self.key)},
            ),
        )
        for _ in range(500):
            node = await self.client.get_node(PROJECT, ZONE, name)
            if node.get("state") == "READY":
                break
            await asyncio.sleep(0.02)
        ips = [e["ipAddress"] for e in node["networkEndpoints"]]
        await eventually(lambda: all(listening(ip, self.hosts.port) for ip in ips), "sshd up")

    async def control(self, slot: int, action: str) -> None:
        import aiohttp

        url = (f"{self.emulator.url}/_emulator/v1/projects/{PROJECT}/locations/{ZONE}/nodes/"
               f"{FLEET}-{slot}:{action}")  # fmt: skip
        async with aiohttp.ClientSession() as session, session.post(url, json={}) as response:
            assert response.status == 200, await response.text()

    async def observe(self, now: datetime) -> list[ZoneObservation]:
        nodes = await self.client.list_nodes(PROJECT, ZONE)
        return [ZoneObservation(ZONE, now, tuple(node_from_json(ZONE, n) for n in nodes))]

    # -- the worker's side ----------------------------------------------------------------------

    def home(self, worker: int, slot: int = 0) -> Path:
        node = self.emulator.state.node(f"projects/{PROJECT}/locations/{ZONE}/nodes/{FLEET}-{slot}")
        assert node is not None
        return self.hosts.home(node, worker)

    def read(self, worker: int, relative: str, slot: int = 0) -> str:
        path = self.home(worker, slot) / relative
        return path.read_text() if path.exists() else ""

    def run_dir(self, worker: int, run_id: str, attempt: int) -> Path:
        return self.home(worker) / ".tpucared" / "runs" / run_id / f"attempt-{attempt}"

    def pid(self, worker: int, run_id: str, attempt: int) -> int:
        return int((self.run_dir(worker, run_id, attempt) / "pid").read_text())

    # -- the daemon -----------------------------------------------------------------------------

    async def tick(self, runner: WorkloadRunner | None = None) -> Plan:
        runner = runner or self.runner
        now = datetime.now(UTC)
        observations = await self.observe(now)
        snapshot = await self.store.load_snapshot()
        probes = await runner.probe(snapshot, now)
        plan = plan_tick(self.specs, observations, snapshot, probes, now, Policy(), OWNER,
                         reported=self.reported, workload_policy=self.policy)  # fmt: skip
        self.reported = plan.standing
        node_plan, workload = WorkloadRunner.split(plan)
        await apply_node_actions(self.store, self.client, node_plan.actions, now)
        await runner.execute_all(workload, now=now)
        return plan

    async def tick_until(self, check: Callable[[Plan], bool], what: str, ticks: int = 100) -> Plan:
        for _ in range(ticks):
            plan = await self.tick()
            if check(plan):
                return plan
            await asyncio.sleep(0.05)
        raise AssertionError(f"no tick did {what}")

    async def slot(self, index: int = 0) -> SlotRecord:
        async with self.store.read() as r:
            record = await r.slot(FLEET, index)
        assert record is not None
        return record

    async def attempts(self, index: int = 0) -> list[WorkloadAttemptRecord]:
        async with self.store.read() as r:
            return sorted(await r.workload_attempts(FLEET, index), key=lambda a: a.number)


def ssh_config(port: int, key: Path = Path("unused")) -> SshConfig:
    return SshConfig(user=USER, port=port, key=key, internal_ip=False, concurrency=64)


def ssh_emulator(tmp_path: Path) -> dict[str, Any]:
    """Emulator options (over the suite's fast ones): SSH worker hosts, quick creates."""
    return {
        "create_seconds": 0.1,
        "delete_seconds": 0.05,
        "ssh_hosts": True,
        "ssh_port": free_port("0.0.0.0"),
        "hosts_dir": str(tmp_path / "hosts"),
    }


Make = Callable[..., Awaitable[Harness]]


@contextlib.asynccontextmanager
async def harnesses(emulator: EmulatorServer, tmp_path: Path) -> AsyncIterator[Make]:
    """`await make(spec, environ=..., guest_keys=True)`: a harness for a one-slot fleet of
    `spec`, over a migrated database in `tmp_path` and a fresh client key."""
    db = tmp_path / "state.db"
    await upgrade_to_head(db)
    store = Store.open(db)
    client = await make_client(emulator)
    key = asyncssh.generate_private_key("ssh-ed25519")
    made: list[Harness] = []

    async def make(
        spec: WorkloadSpec, *, environ: dict[str, str] | None = None, guest_keys: bool = True
    ) -> Harness:
        clouds = CloudMap({"tpu": TpuCloud(client)}, [])
        fetch = guest_attribute_host_keys(clouds, PROJECT) if guest_keys else None
        h = Harness(emulator, client, store, key, [fleet(spec)])
        h.runner = h.new_runner(fetch=fetch, environ=environ)
        made.append(h)
        return h

    try:
        yield make
    finally:
        for h in made:
            await h.runner.close()
        await client.aclose()
        await store.close()


def kinds(plan: Plan) -> list[str]:
    return [a.kind for a in plan.actions]


async def make_client(emulator: EmulatorServer) -> TpuClient:
    return TpuClient(emulator.url, token_source=load_token_source("none"))


async def apply_node_actions(
    store: Store, client: TpuClient, actions: Iterable[Action], now: datetime
) -> None:
    """The node actions of core/vocab/actions.py that these tests meet, as the executor's
    contract says; creates are left out (the tests create nodes themselves)."""
    for a in actions:
        if isinstance(a, Notice | CreateNode):
            continue
        async with store.write() as tx:
            await _record(tx, a, now)
        if isinstance(a, DeleteNode):
            # NOT_FOUND is done; the planner reads the lists either way.
            with contextlib.suppress(ApiError):
                await client.delete_node(PROJECT, a.zone, a.node_name)


async def _record(tx: Tx, a: Action, now: datetime) -> None:
    if isinstance(a, RecordFleet):
        await tx.record_fleet(a.fleet, a.spec_hash, a.spec_json, now)
    elif isinstance(a, OpenSlot):
        await tx.open_slot(a.fleet, a.slot, now)
    elif isinstance(a, Adopt):
        await tx.adopt(a.fleet, a.slot, a.node_name, a.zone, a.accelerator_type, a.phase,
                       a.cloud, now, end_reason=a.end_reason)  # fmt: skip
    elif isinstance(a, Transition):
        await tx.transition(a.incarnation_id, a.expected, a.new, now, reason=a.reason,
                            end_reason=a.end_reason if a.end_reason is not None else KEEP,
                            cloud=a.cloud, slot_update=a.slot_update)  # fmt: skip
    elif isinstance(a, RecordCloud):
        await tx.record_cloud(a.incarnation_id, a.expected, a.cloud, now)
    elif isinstance(a, DeleteNode):
        await tx.begin_delete(a.incarnation_id, a.expected, now, end_reason=a.end_reason)
    else:
        raise AssertionError(f"unexpected node action {a}")


def secret_free(blob: bytes | str, secret: str) -> bool:
    data = blob.encode() if isinstance(blob, str) else blob
    return secret.encode() not in data


def all_cmdlines() -> list[bytes]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((entry / "cmdline").read_bytes())
            except OSError:
                continue
    return out


def workload(run: str, **kw: Any) -> WorkloadSpec:
    return WorkloadSpec(run=run, **kw)


@contextlib.asynccontextmanager
async def daemon_in_process(config: Config, clouds: Clouds, project: str) -> AsyncIterator[Daemon]:
    """The real daemon (runtime.daemon.Daemon) in this process over `clouds` (by api), with its
    workload runner (host keys from `project`'s guest attributes), on the config's database
    (upgraded first); runner and store closed after."""
    await upgrade_to_head(config.daemon.db)
    store = Store.open(config.daemon.db)
    fetch = guest_attribute_host_keys(CloudMap(clouds, config.fleets), project)
    runner = WorkloadRunner.from_config(config, store, fetch_host_keys=fetch)
    try:
        yield Daemon(config, store, clouds, node_template(config), workloads=runner)
    finally:
        await runner.close()
        await store.close()
