"""One probe at a time per zone while several slots of a fleet hunt it (core/nodes/hunt.py,
issue 44): the probe goes on one slot's pace, the others wait, and all follow its success."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import ErrorKind, Provisioning
from tpucared.core.vocab.actions import CreateNode
from tpucared.core.vocab.plan import Plan

from ..core_support import T0, Z1, Z2, ago, inc, node, run, slot, snapshot, spec, world

P = NodePhase
HUNTING: dict[str, Any] = {"create_failures": 3, "last_error": "no more capacity"}


def created(p: Plan) -> list[int]:
    return [c.slot for c in p.of(CreateNode)]


def held(p: Plan) -> dict[int, str]:
    return {h.slot: h.reason for h in p.holds}


def test_four_slots_hunting_one_zone_send_one_probe() -> None:
    s = spec(size=4, zones=(Z1,))
    slots = [slot(i, **HUNTING, next_create_at=ago(seconds=5 - i)) for i in range(4)]
    p = run([s], world(zones=(Z1,)), snapshot(specs=[s], slots=slots))
    assert created(p) == [0]
    for i in (1, 2, 3):
        assert "one probe at a time (slot 0)" in held(p)[i]


def test_while_the_probe_is_in_flight_nobody_else_creates() -> None:
    s = spec(size=4, zones=(Z1,))
    probe = inc(7, 2, P.CREATING, zone=Z1, since=ago(seconds=1), operation="op-7")
    slots = [slot(i, **HUNTING, next_create_at=ago(seconds=3)) for i in range(4)]
    p = run([s], world(zones=(Z1,)), snapshot(probe, specs=[s], slots=slots))
    assert created(p) == []
    assert set(held(p)) == {0, 1, 3}
    assert all("(slot 2)" in r for r in held(p).values())


def test_a_failed_probe_sets_the_pace_of_the_next() -> None:
    s = spec(size=4, zones=(Z1,))
    posted = ago(seconds=2)
    probe = inc(7, 0, P.CREATING, zone=Z1, since=posted, error=ErrorKind.CAPACITY)
    slots = [slot(i, **HUNTING, next_create_at=ago(seconds=10)) for i in range(4)]
    p = run([s], world(zones=(Z1,)), snapshot(probe, specs=[s], slots=slots))
    assert created(p) == []
    (pace,) = {h.until for h in p.holds if h.slot != 0}
    # One slot's capacity pace: 3.6-4 s from the failed probe's post.
    assert pace is not None
    assert posted + timedelta(seconds=3.6) <= pace <= posted + timedelta(seconds=4)
    later = run([s], world(zones=(Z1,)), snapshot(specs=[s], slots=slots), now=pace)
    assert created(later) == [0]


def test_an_operation_that_ended_well_lets_everyone_follow() -> None:
    s = spec(size=4, zones=(Z1,))
    probe = inc(7, 0, P.CREATING, zone=Z1, since=ago(seconds=3), operation=None)
    slots = [slot(i, **HUNTING, next_create_at=ago(seconds=8)) for i in range(4)]
    p = run([s], world(zones=(Z1,)), snapshot(probe, specs=[s], slots=slots))
    assert created(p) == [1, 2, 3]


def test_a_probe_that_reaches_ready_lets_everyone_follow() -> None:
    s = spec(size=4, zones=(Z1,))
    probe = inc(7, 0, P.CREATING, zone=Z1, since=ago(seconds=3), operation="op-7")
    slots = [slot(i, **HUNTING, next_create_at=ago(seconds=8)) for i in range(4)]
    p = run(
        [s], world(node(f"{s.name}-0", Z1), zones=(Z1,)), snapshot(probe, specs=[s], slots=slots)
    )
    assert created(p) == [1, 2, 3]


def test_a_fresh_slot_follows_the_probe_too() -> None:
    s = spec(size=3, zones=(Z1,))
    slots = [slot(0, **HUNTING, next_create_at=ago(seconds=1)), slot(1), slot(2)]
    p = run([s], world(zones=(Z1,)), snapshot(specs=[s], slots=slots))
    assert created(p) == [0]
    assert set(held(p)) == {1, 2}


def test_a_lone_slot_keeps_its_own_pace() -> None:
    s = spec(size=1, zones=(Z1,))
    due = slot(0, **HUNTING, next_create_at=ago(seconds=1))
    assert created(run([s], world(zones=(Z1,)), snapshot(specs=[s], slots=[due]))) == [0]
    waiting = slot(0, **HUNTING, next_create_at=T0 + timedelta(seconds=2))
    p = run([s], world(zones=(Z1,)), snapshot(specs=[s], slots=[waiting]))
    assert created(p) == []
    assert "backoff until" in held(p)[0]


def test_a_slot_in_a_long_backoff_hunts_nothing() -> None:
    # A quota or a name held by someone else waits its own minutes; the others go as usual.
    s = spec(size=3, zones=(Z1,))
    slots = [slot(0, **HUNTING, next_create_at=T0 + timedelta(minutes=20)), slot(1), slot(2)]
    p = run([s], world(zones=(Z1,)), snapshot(specs=[s], slots=slots))
    assert created(p) == [1, 2]


def test_each_zone_has_its_own_probe() -> None:
    s = spec(size=4, zones=(Z1, Z2))
    slots = [
        slot(i, **HUNTING, next_zone=(Z1, Z2)[i % 2], next_create_at=ago(seconds=1))
        for i in range(4)
    ]
    p = run([s], world(), snapshot(specs=[s], slots=slots))
    assert sorted((c.slot, c.zone) for c in p.of(CreateNode)) == [(0, Z1), (1, Z2)]


def test_queued_and_other_fleets_are_not_held() -> None:
    queued = spec("qd", size=3, zones=(Z1,), provisioning=Provisioning.QUEUED)
    direct = spec("dr", size=2, zones=(Z1,))
    slots = [slot(i, "qd", **HUNTING, next_create_at=ago(seconds=1)) for i in range(3)]
    slots += [slot(i, "dr", **HUNTING, next_create_at=ago(seconds=1)) for i in range(2)]
    p = run(
        [queued, direct],
        world(queued=True, zones=(Z1,)),
        snapshot(specs=[queued, direct], slots=slots),
    )
    assert sorted((c.fleet, c.slot) for c in p.of(CreateNode)) == [
        ("dr", 0),
        ("qd", 0),
        ("qd", 1),
        ("qd", 2),
    ]
