"""The capacity benchmark on Compute Engine (`--api compute`): its participants run once in
a short stockout (the real daemon with a spot `api = "compute"` fleet, its flex-start fleet
and the gcloud loop), and its pure parts: the Compute Engine request kinds, the zone of a
path, the presets' Compute Engine form and the winning insert of a sample.

Not a performance test: the run checks that every participant gave its sample, that the
winner is an insert posted after capacity came back, and that the hunt's requests are Compute
Engine's methods, so `--api compute` cannot rot unnoticed. Missing parts fail, never skip.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from bench import capacity
from bench.capacity.samples import analyse, compute_kind, kind_of, zone_of

ZONE_PATH = "/compute/v1/projects/p/zones/us-bench1-a"


def test_compute_engine_requests_have_their_methods_as_kinds() -> None:
    cases = {
        ("POST", "/instances"): "instances.insert",
        ("GET", "/instances"): "instances.list",
        ("GET", "/instances/vm-0"): "instances.get",
        ("DELETE", "/instances/vm-0"): "instances.delete",
        ("GET", "/operations"): "zoneOperations.list",
        ("GET", "/operations/op-1"): "zoneOperations.get",
        ("POST", "/operations/op-1/wait"): "zoneOperations.wait",
        ("GET", "/instanceGroupManagers"): "instanceGroupManagers.list",
        ("POST", "/instanceGroupManagers"): "instanceGroupManagers.insert",
        ("POST", "/instanceGroupManagers/m/listManagedInstances"): (
            "instanceGroupManagers.listManagedInstances"
        ),
    }
    for (method, tail), kind in cases.items():
        assert kind_of({"method": method, "path": ZONE_PATH + tail}) == kind, tail
    assert compute_kind("GET", "/compute/v1/projects/p/global/instanceTemplates") == "GET other"
    assert zone_of(ZONE_PATH + "/operations/op-1/wait") == "us-bench1-a"
    assert zone_of("/v2/projects/p/locations/us-bench2-a/nodes") == "us-bench2-a"
    assert zone_of("/compute/v1/projects/p/regions/us-bench1/resourcePolicies") is None


def test_every_preset_has_a_compute_engine_form() -> None:
    quick = capacity.on_compute(capacity.QUICK)
    assert quick.api == "compute"
    assert [(g.tool, g.slots, g.capacity) for g in quick.groups] == [
        ("tpucared", 1, "spot"),
        ("tpucared", 4, "spot"),
        ("gcloud", 1, "spot"),
        ("gcloud", 4, "spot"),
        ("tpucared", 1, "flex-start"),
    ]
    keys = [g.key for g in capacity.on_compute(capacity.QUEUED).groups]
    assert keys == [
        "tpucared-default-1",
        "gcloud-loop-replay-1",
        "tpucared-flex-start-1",
        "tpucared-default-16",
        "gcloud-loop-replay-16",
        "tpucared-flex-start-16",
    ]


def _sample(inserts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "group": "gcloud loop replay",
        "tool": "gcloud",
        "slots": 2,
        "zone": "us-bench1-a",
        "api": "compute",
        "stocked_out": 1000.0,
        "restored": 1020.0,
        "provisioning": "direct",
        "capacity": "spot",
        "ready_nodes": ["vm-0", "vm-1"],
        "created_at": {},
        "inserts": inserts,
    }


def test_the_winning_insert_is_the_first_of_each_vm_after_capacity_came_back() -> None:
    settings = dataclasses.replace(capacity.on_compute(capacity.HUNT), count_from=5.0)
    stockout = "ZONE_RESOURCE_POOL_EXHAUSTED"
    inserts = [
        {"name": "vm-0", "time": 1010.0, "error": stockout, "done": True},
        {"name": "vm-0", "time": 1019.5, "error": stockout, "done": True},
        {"name": "vm-0", "time": 1021.0, "error": None, "done": True},
        {"name": "vm-1", "time": 1022.5, "error": None, "done": True},
    ]
    log = [{"method": "POST", "path": ZONE_PATH + "/instances", "time": 1015.0, "status": 200}]
    out = analyse(_sample(inserts), log, settings)
    assert out["latency_s"] == pytest.approx(1.0)
    assert out["ready_s"] == pytest.approx(1.0 + settings.timing.create_seconds)
    assert out["every_slot_latency_s"] == pytest.approx(2.5)
    assert out["creates_at_s"] == [10.0, 19.5, 21.0]
    assert out["requests_per_minute"] == {"instances.insert": 4.0, "total": 4.0}  # 15 s counted
    assert "inserts" not in out
    # Judged when the insert leaves PROVISIONING (1 s after its POST): the one posted 0.5 s
    # before the restore is the first that could win, and it did not: the sample is refused.
    end = dataclasses.replace(settings, capacity_judged="end")
    with pytest.raises(RuntimeError, match=r"first insert of \['vm-0'\] did not win"):
        analyse(_sample(inserts), log, end)


@pytest.mark.slow
def test_the_compute_engine_participants_each_hunt_through_a_short_stockout() -> None:
    quick = capacity.on_compute(capacity.QUICK)
    lone = tuple(g for g in quick.groups if g.slots == 1)
    settings = dataclasses.replace(
        quick, groups=lone, stockout=20.0, count_from=3.0, stagger=1.0, model_runs=0
    )  # 20 s: the loop's detection (up to its 10 s list cache) and the daemon's (its 10 s poll)
    # leave a hunt of several inserts in the counted window (at 12 s a window once had none)
    lines: list[str] = []
    result = capacity.run(True, settings=settings, progress=lines.append)

    assert result["errors"] == {}
    assert result["parameters"]["api"] == "compute"
    assert result["parameters"]["gcloud_compute_waiter"] == {"step": 1.0, "ceiling": 5.0}
    groups = {g["key"]: g for g in result["groups"]}
    assert set(groups) == {"tpucared-default-1", "gcloud-loop-replay-1", "tpucared-flex-start-1"}
    samples = {s["group"]: s for s in result["samples"]}
    assert len(result["samples"]) == len(lone) == len(lines)  # a sample per participant
    known = {
        "instances.insert",
        "instances.list",
        "instances.get",
        "instances.delete",
        "zoneOperations.get",
        "zoneOperations.wait",
        "zoneOperations.list",
        "instanceGroupManagers.list",
        "instanceGroupManagers.insert",
        "instanceGroupManagers.get",
        "instanceGroupManagers.delete",
        "instanceGroupManagers.listManagedInstances",
        "machineTypes.get",
        "total",
    }
    for g in groups.values():
        assert g["latency_s"]["n"] == 1, g
        kinds = g["requests_per_minute_per_zone"]
        assert set(kinds) <= known, g  # Compute Engine's methods only: no TPU API, no "other"
        # Each kind and the total are rounded to 0.1 (samples.py): up to 0.05 apart each.
        assert kinds["total"] == pytest.approx(
            sum(v for k, v in kinds.items() if k != "total"), abs=0.05 * len(kinds) + 1e-9
        )
    for s in samples.values():
        assert s["api"] == "compute"
        assert s["stockout_s"] == pytest.approx(settings.stockout, abs=1.0)
        if s["capacity"] == "flex-start":
            # The cloud hunts: the MIG made its VM once capacity came back, within its retry.
            assert 0.0 <= s["latency_s"] < 5.0, s
            continue
        # The winner is an insert posted after capacity came back ("post"), within one cycle
        # (a failing insert ends 1 s after its POST; the daemon's pace is 4 s).
        assert 0.0 <= s["latency_s"] < 10.0, s
        assert s["creates_at_s"][-1] == pytest.approx(s["stockout_s"] + s["latency_s"], abs=0.01)
    loop = groups["gcloud-loop-replay-1"]["requests_per_minute_per_zone"]
    # The loop inserts and waits (one zoneOperations.wait per failing insert: it ends in 1 s,
    # before the server's limit), polls nothing; one of either may fall outside the window.
    one = 60.0 / (settings.stockout - settings.count_from)
    assert loop["instances.insert"] > 0
    assert loop["zoneOperations.wait"] == pytest.approx(loop["instances.insert"], abs=one + 0.1)
    assert "zoneOperations.get" not in loop
    daemon = groups["tpucared-default-1"]["requests_per_minute_per_zone"]
    assert daemon["instances.list"] > 0  # the daemon lists its zone every tick
    assert daemon["instances.insert"] > 0
    # The daemon waits on its operations too (one wait per insert), never polls them.
    assert daemon["zoneOperations.wait"] == pytest.approx(daemon["instances.insert"], abs=one + 0.1)
    assert "zoneOperations.get" not in daemon
    assert len(samples["gcloud loop replay"]["creates_at_s"]) >= 2  # one failed in the stockout
