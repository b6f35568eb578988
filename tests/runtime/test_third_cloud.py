"""A third, in-test cloud with abilities of its own keeps a slot alive (issue 40).

`ReclaimCloud` is test_cloud_port.py's `FakeCloud` (a dict of nodes whose workers are the
emulator's simulated SSH hosts) with what it can do said differently, in its
`CloudAbilities` (core/model/abilities.py): no queued resources, and a reclaimed node that
only shows STOPPED, the reclaim itself kept in a log of its own ("reclaim log entry", read
through the optional `PreemptionRecords.preemptions`). Nothing in tpucared names it: the
daemon's map of clouds holds it under api "third" (the one registration line, below), the
observer stamps its abilities on its lists, and the core reads the reclaim from its log
because the abilities say so. The real daemon creates the slot's node, launches, sees it
STOPPED, reads the log, ends it "preempted" (cause preempted, in the log's words), deletes
it, creates it again and relaunches with the next TPUCARED_ATTEMPT.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from runtime_support import PROJECT, free_port, query, wait_for, write_config
from test_cloud_port import RUN, FakeCloud, FakeNode

from tpucared.config import load_config
from tpucared.core.model.abilities import CloudAbilities
from tpucared.core.model.observed import ObservedNode, PreemptionRecord
from tpucared.emulator.hosts import SshWorkerHosts
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.daemon import Daemon
from tpucared.runtime.startup import node_template
from tpucared.runtime.workload.launchers import guest_attribute_host_keys
from tpucared.runtime.workload.runner import WorkloadRunner
from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head

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


async def test_a_third_cloud_with_its_own_records_keeps_a_slot_alive(tmp_path: Path) -> None:
    cloud = ReclaimCloud(SshWorkerHosts(tmp_path / "hosts", port=free_port()))
    path = write_config(
        tmp_path,
        "http://127.0.0.1:9",
        size=1,
        fleet=FLEET,
        poll="200ms",
        workload={"run": RUN},
    )  # fmt: skip  (a spot fleet, as write_config writes every one)
    config = load_config(path)
    config = replace(
        config,
        ssh=replace(config.ssh, port=cloud.hosts.port),
        fleets=tuple(replace(f, api=API) for f in config.fleets),
    )
    clouds = {API: cloud}  # the registration: the daemon's clouds, by api
    await upgrade_to_head(config.daemon.db)
    store = Store.open(config.daemon.db)
    fetch = guest_attribute_host_keys(CloudMap(clouds, config.fleets), PROJECT)
    runner = WorkloadRunner.from_config(config, store, fetch_host_keys=fetch)
    node = f"{FLEET}-0"
    try:
        daemon = Daemon(config, store, clouds, node_template(config), workloads=runner)
        run = asyncio.create_task(daemon.run(drain_timeout=2.0))

        async def launched(attempt: int) -> bool:
            assert not run.done(), "the daemon stopped"
            listed = any(n.name == node for n in cloud.nodes.values())
            return listed and cloud.attempts(node) == [attempt]

        await wait_for(lambda: launched(1), 30, "the first launch")
        await cloud.reclaim(node)
        await wait_for(lambda: launched(2), 30, "the relaunch on the new node")
        daemon.stop.set()
        assert await run == 0
    finally:
        await runner.close()
        await store.close()
        await cloud.aclose()

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
