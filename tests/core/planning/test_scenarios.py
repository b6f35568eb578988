"""Whole stories over many ticks: the planner, the executor contract
(tests/core/planning/executor_contract.py) and a scripted cloud, with the clock moved by hand.
Nothing sleeps; nothing does I/O.

`Cloud` is the smallest cloud that answers creates and deletes the way the TPU API does
(a create in a zone without capacity fails with CAPACITY; a node is READY one tick after
its create; a delete takes one tick), and `Daemon` is the runtime's loop in miniature:
observe, plan, record intent, call, record the outcome.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from tests.core.planning.executor_contract import apply_intent, record_outcome
from tpucared.core.model.observed import ObservedNode, ZoneObservation
from tpucared.core.model.specs import ErrorKind, FleetSpec
from tpucared.core.planning.planner import plan
from tpucared.core.vocab.actions import CreateNode, DeleteNode, Notice
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.core.vocab.snapshot import PlainSnapshot
from tpucared.gcp.tpu.states import NodeState, state_fields

from ..core_support import OWNER, T0, Z1, Z2, ours, spec

TICK = timedelta(seconds=10)


@dataclass
class Cloud:
    capacity: dict[str, int] = field(default_factory=lambda: {Z1: 10, Z2: 10})
    nodes: dict[tuple[str, str], ObservedNode] = field(default_factory=dict)
    failing_zones: set[str] = field(default_factory=set)
    next_id: int = 100

    def list(self) -> list[ZoneObservation]:
        out = []
        for zone in (Z1, Z2):
            if zone in self.failing_zones:
                out.append(ZoneObservation(zone=zone, observed_at=T0, error=ErrorKind.TRANSIENT))
            else:
                nodes = tuple(n for (z, _), n in sorted(self.nodes.items()) if z == zone)
                out.append(ZoneObservation(zone=zone, observed_at=T0, nodes=nodes))
        return out

    def create(self, a: CreateNode) -> ErrorKind | None:
        key = (a.zone, a.node_name)
        if key in self.nodes:
            return ErrorKind.ALREADY_EXISTS
        used = sum(1 for (z, _), n in self.nodes.items() if z == a.zone)
        if used >= self.capacity[a.zone]:
            return ErrorKind.CAPACITY
        self.next_id += 1
        self.nodes[key] = ObservedNode(
            name=a.node_name,
            zone=a.zone,
            **state_fields(NodeState.CREATING),
            accelerator_type=a.accelerator_type,
            labels=dict(a.labels),
            cloud_id=str(self.next_id),
        )
        return None

    def delete(self, a: DeleteNode) -> ErrorKind | None:
        key = (a.zone, a.node_name)
        if key not in self.nodes:
            return ErrorKind.NOT_FOUND
        self.nodes[key] = replace(self.nodes[key], **state_fields(NodeState.DELETING))
        return None

    def advance(self) -> None:
        """One tick of cloud time: creates finish, deletes finish."""
        for key, n in list(self.nodes.items()):
            if n.state is NodeState.CREATING:
                self.nodes[key] = replace(n, **state_fields(NodeState.READY))
            elif n.state is NodeState.DELETING:
                del self.nodes[key]

    def set_state(self, zone: str, name: str, state: NodeState) -> None:
        self.nodes[(zone, name)] = replace(self.nodes[(zone, name)], **state_fields(state))


@dataclass
class Daemon:
    specs: list[FleetSpec]
    cloud: Cloud
    snap: PlainSnapshot = field(default_factory=PlainSnapshot)
    now: datetime = T0
    reported: frozenset[str] = frozenset()
    last_id: int = 0
    told: list[str] = field(default_factory=list)
    policy: Policy = field(default_factory=Policy)
    every: timedelta = TICK

    def tick(self) -> Plan:
        now = self.now
        p = plan(
            self.specs,
            self.cloud.list(),
            self.snap,
            now,
            self.policy,
            OWNER,
            reported=self.reported,
        )
        # Record every action's intent first (crash-safe), then make the calls in order.
        before = {i.id for i in self.snap.nodes.values()}
        self.snap = apply_intent(self.snap, p, now, id_floor=self.last_id)
        created = {(i.fleet, i.slot): i.id for i in self.snap.nodes.values() if i.id not in before}
        self.last_id = max([self.last_id, *(i.id for i in self.snap.nodes.values())])
        for a in p.actions:
            if isinstance(a, CreateNode):
                inc_id = created[(a.fleet, a.slot)]
                error = self.cloud.create(a)
                if error is None:
                    self.snap = record_outcome(
                        self.snap,
                        inc_id,
                        now,
                        operation="op",
                        accepted_create=True,
                    )
                else:
                    self.snap = record_outcome(self.snap, inc_id, now, error=error)
            elif isinstance(a, DeleteNode):
                error = self.cloud.delete(a)
                self.snap = record_outcome(
                    self.snap,
                    a.incarnation_id,
                    now,
                    error=error,
                    operation=None if error else "op",
                )
            elif isinstance(a, Notice):
                self.told.append(a.key)
        # The operations finish by the next tick (the observe step would record that).
        for inc in self.snap.nodes.values():
            if inc.operation is not None:
                self.snap = record_outcome(self.snap, inc.id, now, error=inc.error)
        self.reported = p.standing
        self.cloud.advance()
        self.now = now + self.every
        return p

    def phases(self) -> dict[str, str]:
        return {i.node_name: i.phase.value for i in self.snap.nodes.values()}


def test_keeps_a_fleet_alive_through_preemptions() -> None:
    cloud = Cloud()
    d = Daemon([spec(size=2)], cloud)
    d.tick()  # creates
    d.tick()  # CREATING seen
    d.tick()  # READY
    assert d.phases() == {"sweep-0": "ready", "sweep-1": "ready"}

    cloud.set_state(Z1, "sweep-1", NodeState.PREEMPTED)
    p = d.tick()
    assert [a.node_name for a in p.of(DeleteNode)] == ["sweep-1"]
    d.tick()  # the delete finished in the cloud: gone, and recreated in the same plan
    assert d.phases()["sweep-1"] == "requested" or d.phases()["sweep-1"] == "creating"
    for _ in range(3):
        d.tick()
    assert d.phases() == {"sweep-0": "ready", "sweep-1": "ready"}
    assert d.snap.slots[("sweep", 1)].preemptions == 1


def test_stockout_moves_to_the_next_zone() -> None:
    cloud = Cloud(capacity={Z1: 1, Z2: 10})
    d = Daemon([spec(size=2)], cloud)
    d.tick()  # both created in Z1; the second fails for capacity
    p = d.tick()
    moved = [a for a in p.of(CreateNode) if a.zone == Z2]
    assert [a.node_name for a in moved] == ["sweep-1"]
    for _ in range(3):
        d.tick()
    assert d.phases() == {"sweep-0": "ready", "sweep-1": "ready"}
    assert {(n.zone, n.name) for n in cloud.nodes.values()} == {(Z1, "sweep-0"), (Z2, "sweep-1")}


def test_no_capacity_anywhere_backs_off() -> None:
    cloud = Cloud(capacity={Z1: 0, Z2: 0})
    # Ticks a second apart (the daemon wakes when a create fails), for two minutes.
    d = Daemon([spec(size=1)], cloud, every=timedelta(seconds=1))
    starts: list[datetime] = []  # when each round of zones began
    creates = 0
    for _ in range(120):
        now = d.now
        made = d.tick().of(CreateNode)
        creates += len(made)
        starts += [now for c in made if c.zone == Z1]
    # Without backoff that would be 120; the two zones are tried back to back (a create's
    # failure is seen at the next tick), then the slot waits for the pace: a round starts
    # 3.6-4 s after the last create of the previous one was posted.
    assert 2 * 120 / 6 <= creates <= 2 * 120 / 4.6 + 2
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert all(4.6 <= g <= 6 for g in gaps)
    # Every create failed (the last one's failure is recorded at the next tick).
    assert d.snap.slots[("sweep", 0)].create_failures in (creates - 1, creates)


def test_a_daemon_ticking_slower_than_the_pace_creates_at_each_tick() -> None:
    """The capacity wait is a pace from the failed create's post, not a sleep after its
    failure is seen: when ticks are farther apart than the wait, none is lost to it."""
    cloud = Cloud(capacity={Z1: 0, Z2: 0})
    d = Daemon([spec(size=1)], cloud)  # a tick every 10 s
    made = [len(d.tick().of(CreateNode)) for _ in range(30)]
    assert made == [1] * 30


def test_blind_ticks_change_nothing() -> None:
    cloud = Cloud()
    d = Daemon([spec(size=1)], cloud)
    for _ in range(3):
        d.tick()
    cloud.failing_zones = {Z1, Z2}
    cloud.nodes.clear()  # the node vanished while we could not see
    for _ in range(5):
        p = d.tick()
        assert not p.of(CreateNode)
        assert not p.of(DeleteNode)
    assert d.phases() == {"sweep-0": "ready"}
    cloud.failing_zones = set()
    for _ in range(4):
        d.tick()
    assert d.phases() == {"sweep-0": "ready"}  # noticed, ended, recreated
    assert d.snap.slots[("sweep", 0)].preemptions == 1


def test_a_lost_database_adopts_instead_of_recreating() -> None:
    cloud = Cloud()
    first = Daemon([spec(size=2)], cloud)
    for _ in range(4):
        first.tick()
    before = dict(cloud.nodes)
    second = Daemon([spec(size=2)], cloud, now=first.now)
    p = second.tick()
    assert [a.kind for a in p.actions if a.kind in ("adopt", "create", "delete")] == [
        "adopt",
        "adopt",
    ]
    second.tick()
    assert second.phases() == {"sweep-0": "ready", "sweep-1": "ready"}
    assert cloud.nodes == before


def test_scale_down_then_down() -> None:
    cloud = Cloud()
    s3 = spec(size=3)
    d = Daemon([s3], cloud)
    for _ in range(4):
        d.tick()
    d.specs = [spec(size=1)]
    p = d.tick()
    assert [a.node_name for a in p.of(DeleteNode)] == ["sweep-2", "sweep-1"]
    for _ in range(2):
        d.tick()
    assert d.phases() == {"sweep-0": "ready"}
    d.snap = replace(d.snap, fleets={k: replace(v, down=True) for k, v in d.snap.fleets.items()})
    for _ in range(3):
        d.tick()
    assert d.phases() == {}
    assert cloud.nodes == {}


def test_someone_elses_node_on_our_name() -> None:
    cloud = Cloud()
    cloud.nodes[(Z1, "sweep-0")] = ObservedNode(
        name="sweep-0", zone=Z1, **state_fields(NodeState.READY), accelerator_type="v4-8", labels={}
    )
    d = Daemon([spec(size=1)], cloud)
    for _ in range(4):
        d.tick()
    # Left alone, told once, and the slot lives in the other zone.
    assert cloud.nodes[(Z1, "sweep-0")].labels == {}
    assert d.told == [f"foreign/{Z1}/sweep-0"]
    assert cloud.nodes[(Z2, "sweep-0")].labels == ours()
    assert d.phases() == {"sweep-0": "ready"}
