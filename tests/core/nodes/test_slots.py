"""Decision tables for whole fleets: creates, scale-down, `down`, strays, notices, output."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import (
    FLEET_LABEL,
    OWNER_LABEL,
    ErrorKind,
    OnSuccess,
    Provisioning,
    WorkloadSpec,
)
from tpucared.core.vocab.actions import (
    Adopt,
    CreateNode,
    DeleteNode,
    Notice,
    OpenSlot,
    RecordFleet,
    Severity,
)
from tpucared.core.vocab.policy import Policy
from tpucared.gcp.tpu.states import NodeState, QueuedState

from ..core_support import (
    FLEET,
    T0,
    Z1,
    Z2,
    ago,
    deletes,
    failed,
    inc,
    kinds,
    listed,
    node,
    ours,
    qr,
    run,
    seen,
    slot,
    snapshot,
    spec,
    world,
)

P = NodePhase
C = NodeState


def creates(p: object) -> list[tuple[str, str]]:
    return [(c.node_name, c.zone) for c in p.of(CreateNode)]  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# Records for the config


def test_a_new_fleet_gets_records_then_creates() -> None:
    s = spec(size=2)
    p = run([s], world(), snapshot())
    assert kinds(p) == ["record-fleet", "open-slot", "open-slot", "create", "create"]
    (rec,) = p.of(RecordFleet)
    assert rec.spec_hash == s.spec_hash()
    assert json.loads(rec.spec_json)["name"] == FLEET
    assert [(o.fleet, o.slot) for o in p.of(OpenSlot)] == [(FLEET, 0), (FLEET, 1)]


def test_an_edited_spec_is_recorded_again() -> None:
    old, new = spec(size=2), spec(size=3)
    p = run([new], world(), snapshot(specs=[old]))
    (rec,) = p.of(RecordFleet)
    assert rec.spec_hash == new.spec_hash()
    assert "spec changed" in rec.reason
    assert [o.slot for o in p.of(OpenSlot)] == [2]


def test_create_carries_the_spec_and_our_labels() -> None:
    s = spec(size=1, labels={"team": "nlp"})
    (c,) = run([s], world()).of(CreateNode)
    assert c.labels == {"team": "nlp", FLEET_LABEL: FLEET, OWNER_LABEL: "me"}
    assert (c.accelerator_type, c.extra["runtime_version"], c.capacity) == (
        "v4-8",
        "tpu-ubuntu2204-base",
        s.capacity,
    )
    assert (c.queued_resource, c.attempt) == (None, 1)


# ---------------------------------------------------------------------------------------------
# Which empty slot gets a create, where, and when not


CREATE_ROWS = [
    # id, fleet size, slot records (None: defaults), observations, expected creates, holds
    ("empty", 2, None, world(), [("sweep-0", Z1), ("sweep-1", Z1)], []),
    ("zero-size", 0, None, world(), [], []),
    (
        "backoff-pending",
        1,
        [slot(0, create_failures=3, next_create_at=T0.replace(minute=5))],
        world(),
        [],
        ["sweep-0"],
    ),
    (
        "backoff-over",
        1,
        [slot(0, create_failures=3, next_create_at=ago(seconds=1))],
        world(),
        [("sweep-0", Z1)],
        [],
    ),
    ("rotated-zone", 1, [slot(0, next_zone=Z2)], world(), [("sweep-0", Z2)], []),
    (
        "zone-removed-from-config",
        1,
        [slot(0, next_zone="us-east1-d")],
        world(),
        [("sweep-0", Z1)],
        [],
    ),
    ("first-zone-blind", 1, None, [failed(Z1), listed(Z2)], [], ["sweep-0"]),
    ("first-zone-not-listed", 1, None, [listed(Z2)], [], ["sweep-0"]),
    (
        "name-taken-in-first-zone",
        1,
        None,
        world(node(zone=Z1, labels={"owner": "bob"})),
        [("sweep-0", Z2)],
        [],
    ),
    (
        "name-taken-everywhere",
        1,
        None,
        world(node(zone=Z1, labels={}), node(zone=Z2, labels={})),
        [],
        ["sweep-0"],
    ),
    ("done-slot", 1, [slot(0, done=True)], world(), [], []),
]


@pytest.mark.parametrize(
    ("size", "slots", "observations", "want", "held"),
    [row[1:] for row in CREATE_ROWS],
    ids=[row[0] for row in CREATE_ROWS],
)
def test_creates(size, slots, observations, want, held) -> None:  # type: ignore[no-untyped-def]
    s = spec(size=size)
    p = run([s], observations, snapshot(specs=[s], slots=slots))
    assert creates(p) == want
    assert [h.node_name for h in p.holds] == held


def test_a_slot_with_a_node_gets_no_create() -> None:
    s = spec(size=2)
    live = [
        seen(inc(1, 0, P.READY), node("sweep-0")),
        inc(2, 1, P.REQUESTED, since=ago(seconds=5)),
    ]
    p = run([s], world(node("sweep-0")), snapshot(*live, specs=[s]))
    assert creates(p) == []
    assert p.actions == ()


def test_old_node_must_be_gone_before_the_name_is_reused() -> None:
    s = spec(size=1)
    dying = inc(1, 0, P.DELETING, delete_calls=1, last_delete_at=ago(seconds=30))
    p = run([s], world(node(state=C.DELETING)), snapshot(dying, specs=[s]))
    assert creates(p) == []
    assert "still deleting" in p.holds[0].reason


def test_create_limits_per_fleet_and_overall() -> None:
    a, b = spec("a", size=3), spec("b", size=3)
    policy = Policy(max_creates=3, max_creates_per_fleet=2)
    p = run([a, b], world(), snapshot(specs=[a, b]), policy=policy)
    # Slot 0 of every fleet before slot 1 of any; at most 3 in all, at most 2 per fleet.
    assert [c.node_name for c in p.of(CreateNode)] == ["a-0", "b-0", "a-1"]
    assert {h.node_name for h in p.holds} == {"b-1", "a-2", "b-2"}
    assert all("create limit" in h.reason for h in p.holds)


def test_creates_in_flight_count_against_the_limit() -> None:
    s = spec(size=3)
    in_flight = [inc(1, 0, P.REQUESTED, since=ago(seconds=5))]
    p = run([s], world(), snapshot(*in_flight, specs=[s]), policy=Policy(max_creates_per_fleet=2))
    assert [c.node_name for c in p.of(CreateNode)] == ["sweep-1"]


def test_queued_resources_wait_without_blocking_creates() -> None:
    s = spec(size=3, provisioning=Provisioning.QUEUED)
    waiting = [
        inc(1, 0, P.CREATING, queued_resource="sweep-0", since=ago(hours=5)),
        inc(2, 1, P.CREATING, queued_resource="sweep-1", since=ago(hours=5)),
    ]
    obs = [listed(Z1, queued=[qr("sweep-0"), qr("sweep-1")]), listed(Z2, queued=[])]
    p = run([s], obs, snapshot(*waiting, specs=[s]), policy=Policy(max_creates_per_fleet=1))
    (c,) = p.of(CreateNode)
    assert (c.node_name, c.queued_resource, c.provisioning) == (
        "sweep-2",
        "sweep-2",
        Provisioning.QUEUED,
    )


def test_queued_fleet_needs_the_queued_list() -> None:
    s = spec(size=1, provisioning=Provisioning.QUEUED)
    p = run([s], world())  # queued_resources=None: not listed
    assert creates(p) == []
    assert "not listed" in p.holds[0].reason


# ---------------------------------------------------------------------------------------------
# Removing nodes: scale-down, down, finished workloads


def test_scale_down_deletes_the_highest_slots_first() -> None:
    s = spec(size=1)
    nodes = [node(f"sweep-{i}", cloud_id=str(i)) for i in range(4)]
    live = [seen(inc(i + 1, i, P.READY), nodes[i]) for i in range(4)]
    p = run([s], world(*nodes), snapshot(*live, specs=[s]))
    assert deletes(p) == ["sweep-3", "sweep-2", "sweep-1"]
    assert all(d.end_reason == "scaled down: fleet sweep has size 1" for d in p.of(DeleteNode))
    assert creates(p) == []


def test_scale_down_also_stops_pending_creates() -> None:
    s = spec(size=0)
    p = run([s], world(), snapshot(inc(1, 0, P.REQUESTED, since=ago(seconds=5)), specs=[s]))
    (d,) = p.of(DeleteNode)
    assert d.expected is P.REQUESTED


def test_down_deletes_everything_and_creates_nothing() -> None:
    s = spec(size=2)
    n0 = node("sweep-0")
    live = [seen(inc(1, 0, P.READY), n0), inc(2, 1, P.CREATING, since=ago(minutes=1))]
    p = run([s], world(n0), snapshot(*live, specs=[s], down=[FLEET]))
    assert deletes(p) == ["sweep-1", "sweep-0"]
    assert creates(p) == []
    assert all(d.end_reason == "fleet sweep is down" for d in p.of(DeleteNode))


def test_down_covers_a_fleet_removed_from_the_config() -> None:
    n0 = node("old-0")
    live = [seen(inc(1, 0, P.READY, fleet="old"), n0)]
    p = run([], world(n0), snapshot(*live, extra_fleets=["old"], down=["old"]))
    assert deletes(p) == ["old-0"]


@pytest.mark.parametrize(
    ("on_success", "deleted"),
    [(OnSuccess.DELETE, ["sweep-0"]), (OnSuccess.KEEP, [])],
)
def test_finished_workload(on_success: OnSuccess, deleted: list[str]) -> None:
    s = spec(size=1, workload=WorkloadSpec(run="true", on_success=on_success))
    n0 = node()
    p = run([s], world(n0), snapshot(seen(inc(), n0), specs=[s], slots=[slot(0, done=True)]))
    assert deletes(p) == deleted
    assert creates(p) == []


# ---------------------------------------------------------------------------------------------
# Strays: listed, not recorded


STRAY_ROWS = [
    # id, observed node, expected adopt phase (None: no adopt), expected notice key prefix
    ("ours-ready", node("sweep-1"), P.READY, None),
    ("ours-creating", node("sweep-1", state=C.CREATING), P.CREATING, None),
    ("ours-repairing", node("sweep-1", state=C.REPAIRING), P.READY, None),
    ("ours-preempted", node("sweep-1", state=C.PREEMPTED), P.DEAD, None),
    ("ours-being-deleted", node("sweep-1", state=C.DELETING), P.DELETING, None),
    ("ours-beyond-size", node("sweep-7"), P.DEAD, None),
    ("ours-bad-name", node("sweep-x", labels=ours(FLEET)), None, "badname/"),
    ("ours-unmanaged-fleet", node("gone-0"), None, "unmanaged/gone"),
    ("foreign-on-our-name", node("sweep-1", labels={"team": "x"}), None, "foreign/"),
    ("foreign-elsewhere", node("web-1", labels={}), None, None),
    ("other-daemon-our-name", node("sweep-1", labels=ours(FLEET, "bob")), None, "foreign/"),
    ("other-daemon-elsewhere", node("x-1", labels=ours("x", "bob")), None, None),
]


@pytest.mark.parametrize(
    ("observed", "phase", "notice"),
    [row[1:] for row in STRAY_ROWS],
    ids=[row[0] for row in STRAY_ROWS],
)
def test_strays(observed, phase, notice) -> None:  # type: ignore[no-untyped-def]
    s = spec(size=2)
    n0 = node("sweep-0")
    p = run([s], world(n0, observed), snapshot(seen(inc(), n0), specs=[s]))
    adopts = p.of(Adopt)
    assert [a.phase for a in adopts] == ([phase] if phase else [])
    keys = [n.key for n in p.of(Notice)]
    if notice:
        assert len(keys) == 1
        assert keys[0].startswith(notice)
    else:
        assert keys == []
    assert not p.of(DeleteNode)  # never in the same tick: adopt first


def test_an_adopted_slot_gets_no_create() -> None:
    s = spec(size=1)
    p = run([s], world(node("sweep-0")), snapshot(specs=[s]))
    (a,) = p.of(Adopt)
    assert (a.node_name, a.zone, a.phase, a.cloud.cloud_id) == ("sweep-0", Z1, P.READY, "101")
    assert creates(p) == []


def test_a_duplicate_of_a_live_slot_is_left_alone() -> None:
    s = spec(size=1)
    here, there = node("sweep-0", Z1), node("sweep-0", Z2, cloud_id="202")
    p = run([s], world(here, there), snapshot(seen(inc(), here), specs=[s]))
    assert not p.of(Adopt)
    (n,) = p.of(Notice)
    assert n.key == f"duplicate/{Z2}/sweep-0"


def test_queued_leftovers_of_ours_are_adopted_for_deletion() -> None:
    s = spec(size=1, provisioning=Provisioning.QUEUED)
    obs = [listed(Z1, queued=[qr(state=QueuedState.FAILED)]), listed(Z2, queued=[])]
    p = run([s], obs, snapshot(specs=[s]))
    (a,) = p.of(Adopt)
    assert (a.phase, a.queued_resource) == (P.DEAD, "sweep-0")
    assert creates(p) == []


def test_unmanaged_fleet_records_are_left_alone_and_reported() -> None:
    n0 = node("old-0", state=C.PREEMPTED)
    live = [seen(inc(1, 0, P.READY, fleet="old"), node("old-0"))]
    p = run([spec()], world(n0), snapshot(*live, specs=[spec()], extra_fleets=["old"]))
    assert [a for a in p.actions if getattr(a, "fleet", None) == "old" and a.kind != "notice"] == []
    (n,) = [n for n in p.of(Notice) if n.key == "unmanaged/old"]
    assert "old-0" in n.reason
    assert n.severity is Severity.WARNING


# ---------------------------------------------------------------------------------------------
# Notices, plan output


def test_zone_errors_a_person_must_fix_are_told() -> None:
    p = run([spec(size=0)], [failed(Z1, ErrorKind.PERMISSION), listed(Z2)])
    (n,) = p.of(Notice)
    assert n.key == f"zone-error/{Z1}/permission"
    assert n.severity is Severity.ERROR


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("permission: Location us-central2-b is not found", "(permission: Location us-central"),
        ("Location us-central2-b is not found", "(permission: Location us-central"),
        (None, "(permission); its nodes"),
    ],
)
def test_a_zone_error_names_its_kind_once(message: str | None, shown: str) -> None:
    obs = ZoneObservation(
        zone=Z1, observed_at=T0, error=ErrorKind.PERMISSION, error_message=message
    )
    (n,) = run([spec(size=0)], [obs, listed(Z2)]).of(Notice)
    assert shown in n.reason
    assert "permission: permission" not in n.reason


def test_malformed_zone_lists_are_told() -> None:
    obs = ZoneObservation(zone=Z1, observed_at=T0, error=ErrorKind.MALFORMED, error_message="x")
    (n,) = run([spec(size=0)], [obs, listed(Z2)]).of(Notice)
    assert n.key == f"zone-error/{Z1}/malformed"


def test_transient_zone_errors_are_not_told() -> None:
    assert not run([spec(size=0)], [failed(Z1), listed(Z2)]).of(Notice)


def test_spec_drift_is_told() -> None:
    s = spec(size=1, accelerator_type="v4-16")
    n0 = node()
    p = run([s], world(n0), snapshot(seen(inc(), n0), specs=[s]))
    (n,) = p.of(Notice)
    assert n.key == "drift/sweep/v4-16"
    assert "v4-8" in n.reason


def test_notices_are_told_once_while_standing() -> None:
    s = spec(size=1)
    obs = world(node(labels={}))  # someone else's node on our slot's name
    first = run([s], obs)
    (n,) = first.of(Notice)
    again = run([s], obs, reported=first.standing)
    assert not again.of(Notice)
    assert again.standing == first.standing
    # Once the condition clears it leaves `standing`, so a recurrence is told again.
    assert n.key not in run([s], world(), reported=first.standing).standing


def test_render_has_one_line_per_action_and_hold() -> None:
    s = spec(size=2)
    snap = snapshot(specs=[s], slots=[slot(0), slot(1, next_create_at=T0.replace(hour=13))])
    p = run([s], world(), snap)
    lines = p.render().splitlines()
    assert len(lines) == len(p.actions) + len(p.holds)
    assert lines[0].startswith("create")
    assert "sweep-0 in us-central2-b" in lines[0]
    assert lines[-1].startswith("hold")
    assert "backoff until" in lines[-1]
    assert run([spec(size=0)], world()).render() == "nothing to do"


def test_to_json_round_trips() -> None:
    s = spec(size=1)
    n0 = node(state=C.PREEMPTED)
    p = run([s], world(n0), snapshot(seen(inc(), node()), specs=[s]))
    data = json.loads(p.to_json())
    assert data["now"] == T0.isoformat()
    assert [a["action"] for a in data["actions"]] == ["transition", "delete"]
    transition = data["actions"][0]
    assert (transition["expected"], transition["new"]) == ("ready", "dead")
    assert transition["slot_update"]["add_preemptions"] == 1
    assert transition["cloud"]["cloud_state"] == "PREEMPTED"


def test_plan_is_deterministic_and_order_free() -> None:
    a, b = spec("a", size=2), spec("b", size=2)
    nodes = [node("a-0"), node("b-1", zone=Z2), node("a-1", state=C.PREEMPTED)]
    snap = snapshot(seen(inc(1, 0, P.READY, fleet="a"), nodes[0]), specs=[a, b])
    first = run([a, b], world(*nodes), snap)
    assert run([a, b], world(*nodes), snap) == first
    assert run([a, b], list(reversed(world(*reversed(nodes)))), snap) == first


def test_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        run([spec()], world(), now=T0.replace(tzinfo=None))


def test_stale_slot_record_does_not_matter_once_adopted() -> None:
    s = spec(size=1)
    snap = snapshot(specs=[s], slots=[replace(slot(0), create_failures=5, next_zone=Z2)])
    p = run([s], world(node("sweep-0")), snap)
    assert [a.kind for a in p.actions] == ["adopt"]


# ---------------------------------------------------------------------------------------------
# Deletes in flight (the runtime's input): the name is not free yet

WAITS = f"a delete of {FLEET}-0 in {Z1} is still in flight; its name is not free yet"


def test_a_create_waits_while_a_delete_of_its_name_is_in_flight() -> None:
    # The old node is gone from the list and its incarnation ended, but the delete call
    # (retrying) or its operation may still reach the name: no create goes out under it.
    s = spec(size=1, zones=(Z1,))
    deleting = {("", Z1, f"{FLEET}-0"): frozenset({7})}
    p = run([s], world(zones=(Z1,)), snapshot(specs=[s]), deleting=deleting)
    assert p.of(CreateNode) == ()
    (hold,) = p.holds
    assert (hold.node_name, hold.on_delete) == (f"{FLEET}-0", True)
    assert (
        hold.reason == f"a delete of {FLEET}-0 in {Z1} is still in flight; its name is not free yet"
    )
    assert hold.reason in p.render()
    # Once it ended, the create goes out.
    assert creates(run([s], world(zones=(Z1,)), snapshot(specs=[s]))) == [(f"{FLEET}-0", Z1)]


def test_a_delete_waits_for_another_incarnations_delete_of_the_same_name() -> None:
    s = spec(size=1)
    dead = node(state=C.PREEMPTED)
    record = seen(inc(1, 0, P.READY), node())
    snap = snapshot(record, specs=[s])
    assert [d.incarnation_id for d in run([s], world(dead), snap).of(DeleteNode)] == [1]
    theirs = {("", Z1, f"{FLEET}-0"): frozenset({2})}
    held = run([s], world(dead), snap, deleting=theirs)
    assert held.of(DeleteNode) == ()
    assert [h.reason for h in held.holds if h.on_delete] == [WAITS]
    # Its own delete in flight holds nothing (that is the per-call rule's business).
    mine = {("", Z1, f"{FLEET}-0"): frozenset({1})}
    assert [
        d.incarnation_id for d in run([s], world(dead), snap, deleting=mine).of(DeleteNode)
    ] == [1]
