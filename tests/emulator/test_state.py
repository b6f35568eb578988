"""The emulated cloud's state machine, driven directly with a manual clock (no HTTP, no sleeps).

Node lifecycle, capacity accounting, operations, host-hook events and persistence. The HTTP
layer on top is tested in test_api.py; here every transition is checked at the exact instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tpucared_emulator.clock import ManualClock
from tpucared_emulator.errors import ApiError
from tpucared_emulator.options import EmulatorOptions
from tpucared_emulator.persistence import load_state, save_state
from tpucared_emulator.state import EmulatorState

P, Z, T = "proj", "us-central2-b", "v4-8"
CREATE, DELETE = 10.0, 5.0


def make_state(**options: Any) -> tuple[EmulatorState, ManualClock]:
    clock = ManualClock()
    opts = EmulatorOptions(create_seconds=CREATE, delete_seconds=DELETE, seed=1, **options)
    return EmulatorState(opts, clock), clock


def tick(state: EmulatorState, clock: ManualClock, seconds: float) -> None:
    clock.advance(seconds)
    state.advance()


def body(accelerator_type: str = T, **fields: Any) -> dict[str, Any]:
    return {"acceleratorType": accelerator_type, "runtimeVersion": "tpu-vm-base", **fields}


def spot(**fields: Any) -> dict[str, Any]:
    return body(schedulingConfig={"spot": True}, **fields)


def error_of(fn: Any, *args: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        fn(*args)
    return caught.value


def test_create_is_creating_then_ready_at_exactly_create_seconds() -> None:
    state, clock = make_state()
    op = state.create_node(P, Z, "n", body())
    node = state.get_node(P, Z, "n")
    assert node.state == "CREATING"
    assert "networkEndpoints" not in node.to_json()  # not provisioned yet
    assert "health" not in node.to_json()
    assert not op.done
    assert "done" not in op.to_json()

    tick(state, clock, CREATE - 0.001)
    assert node.state == "CREATING"
    tick(state, clock, 0.001)
    assert node.state == "READY"
    assert node.health == "HEALTHY"
    assert op.done
    rendered = op.to_json()
    assert rendered["done"] is True
    assert rendered["response"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2.Node"
    assert rendered["response"]["state"] == "READY"
    assert rendered["metadata"]["endTime"] > rendered["metadata"]["createTime"]
    assert [(e.kind, e.node.node_id) for e in state.take_host_events()] == [("start", "n")]


def test_delete_goes_through_deleting_and_finishes_with_empty() -> None:
    state, clock = make_state()
    state.create_node(P, Z, "n", body())
    tick(state, clock, CREATE)
    state.take_host_events()

    op = state.delete_node(P, Z, "n")
    assert state.get_node(P, Z, "n").state == "DELETING"
    assert [e.kind for e in state.take_host_events()] == ["stop"]
    conflict = error_of(state.delete_node, P, Z, "n")
    assert (conflict.status_name, conflict.message) == ("ABORTED", "unable to queue the operation")

    tick(state, clock, DELETE)
    assert error_of(state.get_node, P, Z, "n").http_status == 404
    assert op.to_json()["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}


def test_preempted_node_stays_listed_and_holds_capacity_until_deleted() -> None:
    state, clock = make_state(capacity={(Z, T): 1})
    state.create_node(P, Z, "a", spot())
    tick(state, clock, CREATE)
    state.preempt(P, Z, "a")
    assert state.get_node(P, Z, "a").state == "PREEMPTED"
    assert "health" not in state.get_node(P, Z, "a").to_json()

    starved = state.create_node(P, Z, "b", spot())  # the POST itself succeeds
    assert state.get_node(P, Z, "b").state == "CREATING"
    tick(state, clock, CREATE)
    assert starved.error is not None
    assert starved.error["code"] == 8
    assert starved.error["message"].startswith(
        f'There is no more capacity in the zone "{Z}"; you can try in another zone where '
        "Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x"
    )
    assert error_of(state.get_node, P, Z, "b").status_name == "NOT_FOUND"
    assert state.capacity() == [{"zone": Z, "accelerator_type": T, "available": 1, "in_use": 1}]

    state.delete_node(P, Z, "a")
    tick(state, clock, DELETE)
    assert state.capacity()[0]["in_use"] == 0
    ok = state.create_node(P, Z, "b", spot())
    tick(state, clock, CREATE)
    assert ok.done
    assert ok.error is None


def test_reserved_create_beyond_capacity_has_its_own_message() -> None:
    state, clock = make_state(capacity={(Z, T): 0})
    op = state.create_node(P, Z, "r", body(schedulingConfig={"reserved": True}))
    tick(state, clock, CREATE)
    assert op.error is not None
    assert op.error["code"] == 8
    assert op.error["message"].startswith(
        "Insufficient reserved capacity. Contact customer support to increase your "
        "reservation. [EID: 0x"
    )


def test_capacity_is_per_zone_and_type() -> None:
    state, clock = make_state(capacity={(Z, T): 1})
    for node_id, zone, kind in [("a", Z, T), ("b", Z, "v4-16"), ("c", "us-central1-a", T)]:
        state.create_node(P, zone, node_id, body(kind))
    tick(state, clock, CREATE)
    assert {n.node_id: n.state for n in state.all_nodes()} == {
        "a": "READY",
        "b": "READY",
        "c": "READY",
    }


def test_preempted_while_creating_fails_its_operation_but_stays_listed() -> None:
    state, clock = make_state()
    op = state.create_node(P, Z, "n", spot())
    tick(state, clock, 1)
    state.preempt(P, Z, "n")
    assert op.done
    assert op.error is not None
    assert "preempted while it was being created" in op.error["message"]
    tick(state, clock, CREATE)  # the stale READY timer does nothing
    assert state.get_node(P, Z, "n").state == "PREEMPTED"
    assert state.take_host_events() == []  # its hosts never started


@pytest.mark.parametrize(("action", "state_name"), [("preempt", "PREEMPTED"),
                                                     ("terminate", "TERMINATED")])  # fmt: skip
def test_killed_nodes_stop_their_hosts(action: str, state_name: str) -> None:
    state, clock = make_state()
    state.create_node(P, Z, "n", spot())
    tick(state, clock, CREATE)
    getattr(state, action)(P, Z, "n")
    node = state.get_node(P, Z, "n")
    assert node.state == state_name
    assert [e.kind for e in state.take_host_events()] == ["start", "stop"]
    again = error_of(getattr(state, action), P, Z, "n")
    assert again.status_name == "FAILED_PRECONDITION"


def test_vanish_removes_without_trace_and_frees_capacity() -> None:
    state, clock = make_state(capacity={(Z, T): 1})
    state.create_node(P, Z, "n", spot())
    tick(state, clock, CREATE)
    ips = {w.ip for w in state.get_node(P, Z, "n").workers}
    state.vanish(P, Z, "n")
    assert error_of(state.get_node, P, Z, "n").status_name == "NOT_FOUND"
    assert state.capacity() == [{"zone": Z, "accelerator_type": T, "available": 1, "in_use": 0}]
    assert [e.kind for e in state.take_host_events()] == ["start", "stop"]
    state.create_node(P, Z, "n", spot())  # the name is free again, with new addresses
    assert not ips & {w.ip for w in state.get_node(P, Z, "n").workers}


def test_unhealthy_and_heal() -> None:
    state, clock = make_state()
    state.create_node(P, Z, "n", body())
    unhealthy_too_early = error_of(state.unhealthy, P, Z, "n")
    assert unhealthy_too_early.status_name == "FAILED_PRECONDITION"
    tick(state, clock, CREATE)
    node = state.unhealthy(P, Z, "n")
    rendered = node.to_json()
    assert (rendered["state"], rendered["health"]) == ("READY", "UNHEALTHY_MAINTENANCE")
    assert rendered["healthDescription"].startswith("The TPU had a maintenance event at ")
    assert state.heal(P, Z, "n").to_json()["health"] == "HEALTHY"


def test_update_is_refused_outside_ready() -> None:
    state, clock = make_state()
    state.create_node(P, Z, "n", spot())
    creating = error_of(state.update_node, P, Z, "n", {"labels": {"a": "b"}}, "labels")
    assert creating.message.startswith(
        "Cloud TPU received a bad request. update is not supported while in state CREATING"
    )
    tick(state, clock, CREATE)
    state.update_node(P, Z, "n", {"labels": {"a": "b"}, "description": "x"}, "labels")
    assert state.get_node(P, Z, "n").to_json()["labels"] == {"a": "b"}
    assert "description" not in state.get_node(P, Z, "n").to_json()  # not in the mask
    state.preempt(P, Z, "n")
    preempted = error_of(state.update_node, P, Z, "n", {"labels": {}}, "labels")
    assert preempted.code == 3
    assert preempted.message.startswith(
        "Cloud TPU received a bad request. update is not supported while in state PREEMPTED "
        "[EID: 0x"
    )


def test_update_mask_fields() -> None:
    state, clock = make_state()
    state.create_node(P, Z, "n", body(labels={"keep": "x"}, tags=["t"]))
    tick(state, clock, CREATE)
    op = state.update_node(
        P, Z, "n", {"metadata": {"ssh-keys": "u:ssh-ed25519 AAAA u"}}, "metadata,tags"
    )
    assert op.done  # updates finish at once
    rendered = state.get_node(P, Z, "n").to_json()
    assert rendered["metadata"] == {"ssh-keys": "u:ssh-ed25519 AAAA u"}
    assert "tags" not in rendered  # in the mask, absent from the body: cleared
    assert rendered["labels"] == {"keep": "x"}
    state.update_node(
        P, Z, "n", {"network_config": {"enable_external_ips": True}},
        "network_config.enable_external_ips",
    )  # fmt: skip
    endpoint = state.get_node(P, Z, "n").to_json()["networkEndpoints"][0]
    assert endpoint["accessConfig"]["externalIp"] == endpoint["ipAddress"]
    for mask in ("schedulingConfig", "acceleratorType", ""):
        assert error_of(state.update_node, P, Z, "n", {}, mask).http_status == 400


def test_worker_addresses_are_distinct_loopback_and_not_reused_at_once() -> None:
    state, _clock = make_state()
    state.create_node(P, Z, "pod", body("v4-64"))
    state.create_node(P, "us-central1-a", "one", body("v6e-8"))
    state.create_node(P, Z, "lite", body("v5litepod-16"))
    nodes = {n.node_id: n for n in state.all_nodes()}
    assert {k: len(n.workers) for k, n in nodes.items()} == {"pod": 8, "one": 1, "lite": 4}
    ips = [w.ip for n in nodes.values() for w in n.workers]
    assert len(ips) == len(set(ips)) == 13
    for ip in ips:
        octets = ip.split(".")
        assert octets[0] == "127"
        assert ip != "127.0.0.1"
        assert octets[1] != "0"
        assert 1 <= int(octets[3]) <= 254
    state.vanish(P, Z, "pod")
    state.create_node(P, Z, "pod", body("v4-64"))
    assert not {w.ip for w in state.get_node(P, Z, "pod").workers} & set(ips)


def test_preemptible_nodes_die_at_24_hours() -> None:
    state, clock = make_state(preemptible_max_seconds=100.0)
    state.create_node(P, Z, "old", body(schedulingConfig={"preemptible": True}))
    state.create_node(P, Z, "spot", spot())
    tick(state, clock, CREATE)
    tick(state, clock, 100 - CREATE - 0.1)
    assert state.get_node(P, Z, "old").state == "READY"
    tick(state, clock, 0.1)
    assert state.get_node(P, Z, "old").state == "PREEMPTED"
    assert state.get_node(P, Z, "spot").state == "READY"  # spot has no 24 h limit


def test_random_spot_preemptions_follow_the_seed() -> None:
    def lifetimes() -> list[str]:
        state, clock = make_state(spot_mean_lifetime_seconds=50.0)
        for i in range(20):
            state.create_node(P, Z, f"s-{i}", spot())
        state.create_node(P, Z, "on-demand", body())
        tick(state, clock, CREATE)
        tick(state, clock, 50.0)
        return sorted(n.node_id for n in state.all_nodes() if n.state == "PREEMPTED")

    first = lifetimes()
    assert 3 <= len(first) <= 19  # ~63% die within one mean lifetime
    assert "on-demand" not in first
    assert lifetimes() == first


def test_stop_and_start_single_host_on_demand() -> None:
    state, clock = make_state()
    state.create_node(P, Z, "vm", body())
    state.create_node(P, Z, "sp", spot())
    tick(state, clock, CREATE)
    assert error_of(state.stop_node, P, Z, "sp").http_status == 400
    stop = state.stop_node(P, Z, "vm")
    assert state.get_node(P, Z, "vm").state == "STOPPING"
    tick(state, clock, DELETE)
    assert stop.done
    assert state.get_node(P, Z, "vm").state == "STOPPED"
    start = state.start_node(P, Z, "vm")
    tick(state, clock, CREATE)
    assert start.done
    assert state.get_node(P, Z, "vm").state == "READY"
    kinds = [(e.kind, e.node.node_id) for e in state.take_host_events()]
    assert kinds[-2:] == [("stop", "vm"), ("start", "vm")]


def test_delete_while_creating_aborts_the_create() -> None:
    state, clock = make_state(capacity={(Z, T): 1})
    create = state.create_node(P, Z, "n", body())
    delete = state.delete_node(P, Z, "n")
    assert create.done
    assert create.error is not None
    assert create.error["code"] == 10
    tick(state, clock, DELETE)
    assert delete.done
    assert delete.error is None
    assert state.capacity()[0]["in_use"] == 0


def test_create_validation() -> None:
    state, _ = make_state()
    cases: list[tuple[str, str | None, object, int, str]] = [
        (Z, "Bad_Name", body(), 400, "nodeId"),
        (Z, "a" * 64, body(), 400, "nodeId"),
        (Z, "9lives", body(), 400, "nodeId"),
        (Z, None, body(), 400, "nodeId"),
        (Z, "n", {"acceleratorType": T}, 400, "runtime_version"),
        (Z, "n", {"runtimeVersion": "x"}, 400, "accelerator_type"),
        (Z, "n", body("v4-7"), 400, "the accelerator v4-7 was not found in zone us-central2-b"),
        (Z, "n", body(labels={"Upper": "x"}), 400, "label"),
        (Z, "n", body(bogus=1), 400, 'Unknown name "bogus"'),
        (Z, "n", body(schedulingConfig={"spot": "yes"}), 400, "scheduling_config.spot"),
        ("mars-north1-a", "n", body(), 403, "Location mars-north1-a is not found"),
    ]
    for zone, node_id, payload, status, needle in cases:
        error = error_of(state.create_node, P, zone, node_id, payload)
        assert error.http_status == status, (node_id, payload)
        assert needle in error.message, (error.message, needle)
    state.create_node(P, Z, "n", body())
    exists = error_of(state.create_node, P, Z, "n", body())
    assert exists.status_name == "ALREADY_EXISTS"


def test_finished_operations_are_forgotten_oldest_first() -> None:
    state, clock = make_state(max_operations=3)
    ops = [state.create_node(P, Z, f"n{i}", body()) for i in range(3)]
    tick(state, clock, CREATE)
    newer = state.create_node(P, Z, "n3", body())
    assert error_of(state.get_operation, ops[0].name).status_name == "NOT_FOUND"
    assert state.get_operation(ops[1].name) is ops[1]
    assert state.get_operation(newer.name) is newer


def test_guest_attributes_publish_one_host_key_per_worker() -> None:
    state, clock = make_state()
    state.create_node(P, Z, "n", body("v4-32"))
    assert all(a["queryValue"]["items"] == [] for a in state.guest_attributes(P, Z, "n", {}))
    tick(state, clock, CREATE)
    everything = state.guest_attributes(P, Z, "n", {})
    node = state.get_node(P, Z, "n")
    assert [a["queryValue"]["items"][0]["value"] for a in everything] == [
        w.host_public_key.split()[1] for w in node.workers
    ]
    one = state.guest_attributes(
        P, Z, "n", {"queryPath": "hostkeys/ssh-ed25519", "workerIds": ["2"]}
    )
    assert one == [everything[2] | {"queryPath": "hostkeys/ssh-ed25519"}]
    assert state.guest_attributes(P, Z, "n", {"queryPath": "other/"})[0]["queryValue"] == {
        "items": []
    }
    assert error_of(state.guest_attributes, P, Z, "n", {"workerIds": ["4"]}).http_status == 400


def test_snapshot_round_trip_keeps_identity_and_resumes(tmp_path: Path) -> None:
    state, clock = make_state(capacity={(Z, T): 5})
    state.create_node(P, Z, "ready", body())
    tick(state, clock, CREATE)
    state.create_node(P, Z, "creating", body())
    state.create_node(P, Z, "dead", spot())
    state.preempt(P, Z, "dead")
    path = tmp_path / "state.json"
    save_state(state, path)

    restored, clock2 = make_state()
    load_state(restored, path)
    before = {n.node_id: n.to_json() for n in state.all_nodes()}
    after = {n.node_id: n.to_json() for n in restored.all_nodes()}
    assert after == before  # same ids, create times, addresses, states
    old_key = state.get_node(P, Z, "ready").workers[0].host_public_key
    assert restored.get_node(P, Z, "ready").workers[0].host_public_key == old_key
    assert restored.capacity() == [{"zone": Z, "accelerator_type": T, "available": 5, "in_use": 3}]
    tick(restored, clock2, CREATE)
    assert restored.get_node(P, Z, "creating").state == "READY"


@pytest.mark.parametrize("judged", ["post", "end"])
def test_when_capacity_is_judged(judged: str) -> None:
    """ "post": a create posted in a stockout is doomed even if capacity returns before its
    operation ends. "end": the same create succeeds, and one posted with capacity fails if the
    capacity is gone by the time it ends."""
    state, clock = make_state(capacity={(Z, T): 0}, capacity_judged=judged)
    posted_in_stockout = state.create_node(P, Z, "a", spot())
    tick(state, clock, CREATE / 2)
    state.set_capacity(Z, T, 1)  # capacity comes back while the create is in flight
    tick(state, clock, CREATE / 2)
    if judged == "post":
        assert posted_in_stockout.error is not None
        assert posted_in_stockout.error["code"] == 8
        assert state.capacity()[0]["in_use"] == 0
    else:
        assert posted_in_stockout.error is None
        assert state.get_node(P, Z, "a").state == "READY"
        assert state.capacity()[0]["in_use"] == 1

    # Capacity judged at the end is taken only then: a node deleted while CREATING frees none.
    state.set_capacity(Z, T, 2)
    doomed_later = state.create_node(P, Z, "b", spot())
    gone_early = state.create_node(P, Z, "c", spot())
    tick(state, clock, CREATE / 2)
    state.set_capacity(Z, T, 1 if judged == "end" else 2)
    state.delete_node(P, Z, "c")
    tick(state, clock, CREATE / 2)
    tick(state, clock, DELETE)
    if judged == "end":
        assert doomed_later.error is not None  # capacity 1, held by "a" when "b" ended
        assert doomed_later.error["code"] == 8
    else:
        assert doomed_later.error is None  # took its capacity when posted
    # One node holds capacity either way ("a" or "b"); "c" freed what it held, if anything.
    assert state.capacity()[0]["in_use"] == 1
    assert gone_early.done


def test_capacity_pending_survives_a_restart(tmp_path: Path) -> None:
    state, _ = make_state(capacity={(Z, T): 1}, capacity_judged="end")
    state.create_node(P, Z, "a", spot())
    save_state(state, tmp_path / "s.json")
    again, clock2 = make_state(capacity={(Z, T): 1}, capacity_judged="end")
    load_state(again, tmp_path / "s.json")
    assert again.get_node(P, Z, "a").capacity_pending
    tick(again, clock2, CREATE)
    assert again.get_node(P, Z, "a").state == "READY"
    assert again.capacity()[0]["in_use"] == 1
