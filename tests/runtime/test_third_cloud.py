"""A third, in-test cloud with abilities of its own keeps a slot alive (issue 40).

`ReclaimCloud` is test_cloud_port.py's `FakeCloud` (a dict of nodes whose workers are the
emulator's simulated SSH hosts) with what it can do said differently, in its `CloudAbilities`
(core/model/abilities.py): no queued resources, and a reclaimed node that only shows STOPPED,
the reclaim itself kept in a log of its own ("reclaim log entry", read through the optional
`PreemptionRecords.preemptions`). Nothing in tpucared names it: the daemon's map of clouds
holds it under api "third" (the one registration line, in test_cloud_port.py's `daemon_on`,
which both tests share), the observer stamps its abilities on its lists, and the core reads the
reclaim from its log because the abilities say so. The real daemon creates the slot's node,
launches, sees it STOPPED, reads the log, ends it "preempted" (cause preempted, in the log's
words), deletes it, creates it again and relaunches with the next TPUCARED_ATTEMPT.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from runtime_support import free_port, query
from test_cloud_port import FakeCloud, FakeNode, daemon_on, relaunched_after

from tpucared.core.model.abilities import CloudAbilities
from tpucared.core.model.observed import ObservedNode, PreemptionRecord
from tpucared.emulator.hosts import SshWorkerHosts

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
    node = f"{FLEET}-0"
    try:
        # The registration: the daemon's clouds hold it under api "third" (daemon_on).
        async with daemon_on(cloud, tmp_path, api=API, fleet=FLEET) as daemon:
            await relaunched_after(daemon, cloud, node, cloud.reclaim)
    finally:
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
