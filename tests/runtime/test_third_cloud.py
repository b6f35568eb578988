"""A third, in-test cloud with abilities of its own, added by one registration line, keeps a
slot alive (issue 40).

This module is the one new module a cloud takes, and `registered(KIND)` (the fixture
`third`) its one registration line: nothing else in tpucared is edited for it.
`ReclaimCloud` is test_cloud_port.py's `FakeCloud` (a dict of nodes whose workers are the
emulator's simulated SSH hosts) with what it can do said differently, in its `CloudAbilities`
(core/model/abilities.py): no queued resources, and a reclaimed node that only shows STOPPED,
the reclaim itself kept in a log of its own ("reclaim log entry", read through the optional
`PreemptionRecords.preemptions`). `KIND` says the rest: its `api` name, the one key its
fleets name nodes by (`accelerator_type`, nothing they boot), no queueing, no Google service
for preflight, and its connector. With it registered, a config with `api = "third"` loads
(and refuses the other clouds' keys and queueing), preflight checks nothing of it, the
runtime's wiring opens its port, and the real daemon creates the slot's node, launches, sees
it STOPPED, reads the log, ends it "preempted" (cause preempted, in the log's words),
deletes it, creates it again and relaunches with the next TPUCARED_ATTEMPT.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from runtime_support import free_port, query
from test_cloud_port import RUN, FakeCloud, FakeNode, relaunched_after

from bench import daemon_config
from tpucared.config import Config, ConfigError, load_config
from tpucared.config.apis import APIS, ApiRules
from tpucared.core.model.abilities import CloudAbilities
from tpucared.core.model.observed import ObservedNode, PreemptionRecord
from tpucared.gcp import NoAuth
from tpucared.ports.cloud import Cloud, TokenSource
from tpucared.preflight import Status, run_checks
from tpucared.runtime.clouds import CONNECTORS, CloudKind, CloudMap, connect_clouds, registered
from tpucared.runtime.daemon import Daemon
from tpucared.runtime.startup import node_template
from tpucared.runtime.workload.launchers import guest_attribute_host_keys
from tpucared.runtime.workload.runner import WorkloadRunner
from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head
from tpucared_emulator import EmulatorServer
from tpucared_emulator.hosts import SshWorkerHosts

pytestmark = pytest.mark.timeout(90)

API = "third"
FLEET = "third"
WORDS = "reclaim log entry"


@dataclass
class ReclaimCloud(FakeCloud):
    """FakeCloud whose reclaimed nodes show STOPPED; its log says they were reclaimed."""

    log: list[PreemptionRecord] = field(default_factory=list)
    abilities = CloudAbilities(preemption_records=WORDS, host_keys=True)

    def _observed(self, node: FakeNode) -> ObservedNode:
        if node.state != "STOPPED":
            return super()._observed(node)
        # Dead as the fake's PREEMPTED is, under a name that does not say why.
        return replace(super()._observed(replace(node, state="PREEMPTED")), state="STOPPED")

    async def reclaim(self, name: str) -> None:
        node = next(n for n in self.nodes.values() if n.name == name)
        # Logged as it happens: a list that shows it STOPPED finds the entry there.
        self.log.append(
            PreemptionRecord(
                name=name, at=datetime.now(UTC), cloud_id=str(node.vm.uid),
                record=f"reclaim-{node.vm.uid}",
            )
        )  # fmt: skip
        node.state = "STOPPED"
        node.vm.state = "PREEMPTED"
        await self.hosts.stop(node.vm)

    async def preemptions(
        self, project: str, zone: str, nodes: Collection[str]
    ) -> tuple[PreemptionRecord, ...]:
        return tuple(r for r in self.log if r.name in nodes)


def _connect(config: Config, tokens: TokenSource, on_request: object) -> Cloud:
    # Its "endpoint": simulated SSH hosts beside the config file, on the config's port.
    return ReclaimCloud(SshWorkerHosts(config.path.parent / "hosts", port=config.ssh.port))


KIND = CloudKind(
    ApiRules(
        API, "the reclaim cloud", keys=("accelerator_type",), machine=("accelerator_type", None)
    ),
    connect=_connect,
)


@pytest.fixture
def third() -> Iterator[CloudKind]:
    with registered(KIND) as kind:  # the one registration line
        yield kind
    assert API not in APIS, "a test's cloud is forgotten after it"
    assert API not in CONNECTORS


def _write(
    tmp_path: Path, ssh_port: int = 22, endpoint: str = "http://127.0.0.1:9", **keys: Any
) -> Path:
    """A config whose one fleet is on the third cloud: `accelerator_type` and no
    `runtime_version` (it names nothing its nodes boot); `keys` laid over the fleet."""
    mine = {"api": API, "runtime_version": None, "workload": {"run": RUN}, **keys}
    fleet = daemon_config.fleet(FLEET, **mine)
    config = daemon_config.against_emulator(
        endpoint,  # by default nothing: the daemon's test may call no Google API
        fleet,
        poll="200ms",
        ssh={"port": ssh_port},
        policy={"vanish_grace": "1s"},
    )
    return daemon_config.write(tmp_path / "fleet.toml", config)


def _problems(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return str(caught.value)


def test_unregistered_the_api_is_unknown_by_name(tmp_path: Path) -> None:
    said = _problems(_write(tmp_path))
    assert f'fleet "{FLEET}": api: expected "tpu" (the Cloud TPU API) or "compute"' in said


def test_registered_its_config_loads_and_its_rules_hold(tmp_path: Path, third: CloudKind) -> None:
    spec = load_config(_write(tmp_path)).fleets[0]
    assert (spec.api, spec.accelerator_type, spec.provisioning.value) == (API, "v4-8", "direct")
    # Another cloud's keys, and queueing it cannot do, are each a problem of its fleet.
    said = _problems(_write(tmp_path, runtime_version="v2-alpha", provisioning="queued"))
    assert f'fleet "{FLEET}": runtime_version: not for api = "third" fleets' in said
    assert f'fleet "{FLEET}": provisioning: "queued" is not a feature of the reclaim cloud' in said
    said = _problems(_write(tmp_path, accelerator_type=None))
    assert f'fleet "{FLEET}": accelerator_type: required for api = "third"' in said


async def test_preflight_asks_google_nothing_of_it(
    tmp_path: Path, third: CloudKind, emulator: EmulatorServer
) -> None:
    config = load_config(_write(tmp_path, endpoint=emulator.url))
    results = {r.name: r for r in await run_checks(config, NoAuth())}
    mine = {n for n in results if FLEET in n}
    assert mine == {f"cloud[{FLEET}]"}, "no Google check of its fleet: type, network, quota"
    assert results[f"cloud[{FLEET}]"].status is Status.OK
    assert not [n for n in results if n.startswith("api[")], "no Google service to enable"
    said = results[f"permissions[{daemon_config.PROJECT}]"].detail
    assert said == "no fleet lives here: nothing to test"


@asynccontextmanager
async def _daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, ReclaimCloud]]:
    """The real daemon for one slot of the third cloud's fleet, its port opened by the
    runtime's own wiring (`connect_clouds`) from the loaded config."""
    config = load_config(_write(tmp_path, ssh_port=free_port(), size=1))
    opened = connect_clouds(config, NoAuth())
    cloud = opened.pop(API)
    for other in opened.values():  # the Google ones: never used here
        await other.aclose()
    assert isinstance(cloud, ReclaimCloud)
    await upgrade_to_head(config.daemon.db)
    store = Store.open(config.daemon.db)
    clouds: dict[str, Cloud] = {API: cloud}
    fetch = guest_attribute_host_keys(CloudMap(clouds, config.fleets), daemon_config.PROJECT)
    runner = WorkloadRunner.from_config(config, store, fetch_host_keys=fetch)
    try:
        yield Daemon(config, store, clouds, node_template(config), workloads=runner), cloud
    finally:
        await runner.close()
        await store.close()
        await cloud.aclose()


async def test_a_third_cloud_with_its_own_records_keeps_a_slot_alive(
    tmp_path: Path, third: CloudKind
) -> None:
    node = f"{FLEET}-0"
    async with _daemon(tmp_path) as (daemon, cloud):
        await relaunched_after(daemon, cloud, node, cloud.reclaim)

    assert cloud.calls == [f"create {node}", f"delete {node}", f"create {node}"]
    db = tmp_path / "state.db"
    rows = query(db, "SELECT end_reason, loss_cause FROM nodes WHERE fleet = ? ORDER BY id", FLEET)
    assert [(r["end_reason"], r["loss_cause"]) for r in rows] == [
        ("preempted", "preempted"),
        (None, None),
    ]
    said = query(db, "SELECT message FROM events WHERE message LIKE ?", f"%its {WORDS} reclaim-%")
    assert said, "the loss is worded by the cloud's own record"
    attempts = query(
        db, "SELECT number FROM workload_attempts WHERE fleet = ? ORDER BY number", FLEET
    )
    assert [r["number"] for r in attempts] == [1, 2]
