"""From the emulator's request log to the capacity benchmark's samples and group summaries:
latency from capacity back to the winning create (for a queued fleet: to the instant the cloud
gave its queued resource the capacity), and the requests made while hunting, by kind; on the
TPU API (`/v2/projects/P/locations/Z/...`) and on Compute Engine
(`/compute/v1/projects/P/zones/Z/...`, where the winning insert is read from the service's
own insert operations: the request log does not keep the VM's name, which is in the body)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from bench import common
from bench.capacity.settings import BUDGET_PER_FLEET_ZONE, BUDGET_PER_SLOT, Group, Settings
from bench.detection import request_kind


def zone_of(path: str) -> str | None:
    """The zone a request is about: a TPU API location, a Compute Engine zone (None for
    Compute Engine's regional and global paths: templates, workload policies)."""
    parts = path.split("/")
    for scope in ("locations", "zones"):
        if scope in parts and parts.index(scope) + 1 < len(parts):
            return parts[parts.index(scope) + 1]
    return None


# A Compute Engine collection -> the name of its methods in a kind (zoneOperations.wait).
_COLLECTIONS = {
    "instances": "instances",
    "operations": "zoneOperations",
    "instanceGroupManagers": "instanceGroupManagers",
    "machineTypes": "machineTypes",
}


def compute_kind(method: str, path: str) -> str:
    """A `/compute/v1/projects/P/zones/Z/...` request's API method: instances.insert /
    list / get / delete (and their verbs), zoneOperations.get / wait / list,
    instanceGroupManagers.insert / list / get / delete / listManagedInstances, ..."""
    parts = path.split("/")
    rest = parts[parts.index("zones") + 2 :] if "zones" in parts else []
    collection = _COLLECTIONS.get(rest[0]) if rest else None
    if collection is None:
        return f"{method} other"
    if len(rest) == 1:
        return f"{collection}.{'list' if method == 'GET' else 'insert'}"
    if len(rest) == 2:
        return f"{collection}.{'delete' if method == 'DELETE' else 'get'}"
    return f"{collection}.{rest[2]}"  # a custom verb: .../operations/OP/wait, .../NAME/resize


def kind_of(request: Mapping[str, Any]) -> str:
    """bench/detection.py's request kinds, queuedResources.create/list/get/delete/reset, and
    Compute Engine's (compute_kind)."""
    method, path = request["method"], request["path"]
    if "/compute/v1/" in path:
        return compute_kind(method, path)
    if "/queuedResources" not in path or "/operations/" in path:
        return request_kind(request)
    if path.endswith(":reset"):
        return "queuedResources.reset"
    if path.endswith("/queuedResources"):
        return "queuedResources.list" if method == "GET" else "queuedResources.create"
    return "queuedResources.delete" if method == "DELETE" else "queuedResources.get"


# What a participant recorded for the analysis, left out of the sample in the result.
_RAW = ("ready_nodes", "created_at", "inserts")


def cost(
    sample: Mapping[str, Any], requests: Sequence[Mapping[str, Any]], settings: Settings
) -> dict[str, Any]:
    """Every request to the zone from `count_from` into the stockout until capacity came
    back, per minute and by kind (the hunting minute's cost)."""
    restored, stocked_out = sample["restored"], sample["stocked_out"]
    start = stocked_out + settings.count_from
    window = [r for r in requests if start <= r["time"] < restored]
    minutes = (restored - start) / 60.0
    kinds = Counter(kind_of(r) for r in window)
    per_minute = {k: round(v / minutes, 2) for k, v in sorted(kinds.items())}
    total = sum(kinds.values()) / minutes
    return {
        "requests_per_minute": {**per_minute, "total": round(total, 2)},
        "requests_per_minute_per_slot": round(total / sample["slots"], 2),
    }


def analyse_queued(
    sample: dict[str, Any], requests: Sequence[Mapping[str, Any]], settings: Settings
) -> dict[str, Any]:
    """A queued fleet's sample: capacity back -> the first node's createTime (the instant the
    cloud gave a waiting queued resource its capacity) and -> READY (+ create_seconds); for a
    flex-start fleet on Compute Engine, to the first VM's creation (its bulk MIG found the
    capacity and made it; served from the flex-start queue at once)."""
    restored, stocked_out = sample["restored"], sample["stocked_out"]
    queued_create = "queuedResources.create"
    if sample.get("capacity") == "flex-start":
        queued_create = "instanceGroupManagers.insert"
    created = sample["created_at"]
    if len(created) != sample["slots"]:
        raise RuntimeError(f"{sample['zone']}: {len(created)} nodes for {sample['slots']} slots")
    if min(created.values()) < restored:
        raise RuntimeError(f"{sample['zone']}: a node was made before capacity came back")
    first, last = min(created.values()), max(created.values())
    sent = sorted(
        r["time"] - stocked_out
        for r in requests
        if kind_of(r) == queued_create and stocked_out <= r["time"] <= last
    )
    out = {
        **{k: v for k, v in sample.items() if k not in _RAW},
        "stockout_s": round(restored - stocked_out, 3),
        "latency_s": round(first - restored, 4),
        "ready_s": round(first + settings.timing.create_seconds - restored, 4),
        "creates_at_s": [round(t, 2) for t in sent],  # the queued resources' (MIGs') creates
        **cost(sample, requests, settings),
    }
    if sample["slots"] > 1:
        out["every_slot_latency_s"] = round(last - restored, 4)
    return out


def analyse(
    sample: dict[str, Any], requests: Sequence[Mapping[str, Any]], settings: Settings
) -> dict[str, Any]:
    """Latency and cost of one sample, from the zone's requests in the emulator's log."""
    if sample.get("provisioning") == "queued" or sample.get("capacity") == "flex-start":
        return analyse_queued(sample, requests, settings)
    if sample.get("api") == "compute":
        return analyse_compute(sample, requests, settings)
    restored, stocked_out = sample["restored"], sample["stocked_out"]
    # The create that succeeds: the first one posted after capacity came back ("post"), or,
    # when capacity is judged at the operation's end, the first one still in flight then.
    create_s = settings.timing.create_seconds
    lead = create_s if settings.capacity_judged == "end" else 0.0
    creates = [
        r
        for r in requests
        if request_kind(r) == "nodes.create" and r["time"] >= restored - lead and r["status"] == 200
    ]
    first_per_node: dict[str, float] = {}
    for r in sorted(creates, key=lambda r: r["time"]):
        first_per_node.setdefault(str((r.get("query") or {}).get("nodeId")), r["time"])
    if not first_per_node:
        raise RuntimeError(f"{sample['zone']}: no create after capacity came back")
    first = min(first_per_node.values())
    node = min(first_per_node, key=lambda n: first_per_node[n])
    if node not in sample["ready_nodes"]:
        raise RuntimeError(f"{sample['zone']}: the first create ({node}) did not end READY")
    # Every create of the sample, seconds from the stockout: the schedule as it happened.
    sent = sorted(
        r["time"] - stocked_out
        for r in requests
        if request_kind(r) == "nodes.create" and stocked_out <= r["time"] <= first
    )
    out = {
        **{k: v for k, v in sample.items() if k not in _RAW},
        "stockout_s": round(restored - stocked_out, 3),
        # From capacity back to the winning create's POST (negative: it was in flight) and to
        # its node READY (the POST + the emulator's create_seconds): the second is comparable
        # across both semantics.
        "latency_s": round(first - restored, 4),
        "ready_s": round(first + create_s - restored, 4),
        "creates_at_s": [round(t, 2) for t in sent],
        **cost(sample, requests, settings),
    }
    if sample["slots"] > 1:
        complete = len(first_per_node) == sample["slots"]
        out["every_slot_latency_s"] = (
            round(max(first_per_node.values()) - restored, 4) if complete else None
        )
    return out


def analyse_compute(
    sample: dict[str, Any], requests: Sequence[Mapping[str, Any]], settings: Settings
) -> dict[str, Any]:
    """A Compute Engine sample: capacity back -> the winning insert's POST (and -> RUNNING,
    + create_seconds), per VM from the service's insert operations (`inserts`)."""
    restored, stocked_out = sample["restored"], sample["stocked_out"]
    create_s = settings.timing.create_seconds
    # With capacity judged "end", Compute Engine's insert is judged when it leaves
    # PROVISIONING, half its create time after the POST (the emulator's compute/book.py): an
    # insert posted that long before capacity came back is the first that can win.
    lead = create_s / 2 if settings.capacity_judged == "end" else 0.0
    first_per_vm: dict[str, Mapping[str, Any]] = {}
    for insert in sample["inserts"]:  # oldest first
        if insert["time"] >= restored - lead:
            first_per_vm.setdefault(insert["name"], insert)
    if not first_per_vm:
        raise RuntimeError(f"{sample['zone']}: no insert after capacity came back")
    failed = sorted(n for n, i in first_per_vm.items() if i["error"] or not i["done"])
    if failed:
        raise RuntimeError(f"{sample['zone']}: the first insert of {failed} did not win")
    first = min(i["time"] for i in first_per_vm.values())
    out = {
        **{k: v for k, v in sample.items() if k not in _RAW},
        "stockout_s": round(restored - stocked_out, 3),
        "latency_s": round(first - restored, 4),
        "ready_s": round(first + create_s - restored, 4),
        "creates_at_s": [
            round(i["time"] - stocked_out, 2) for i in sample["inserts"] if i["time"] <= first
        ],
        **cost(sample, requests, settings),
    }
    if sample["slots"] > 1:
        complete = len(first_per_vm) == sample["slots"]
        last = max(i["time"] for i in first_per_vm.values())
        out["every_slot_latency_s"] = round(last - restored, 4) if complete else None
    return out


def summarize_group(group: Group, samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    mine = [s for s in samples if s["group"] == group.label and s["slots"] == group.slots]
    if not mine:
        return {
            "tool": group.tool,
            "label": group.label,
            "slots": group.slots,
            "key": group.key,
            "n": 0,
        }
    kinds = sorted({k for s in mine for k in s["requests_per_minute"]})
    per_zone = {
        k: round(sum(s["requests_per_minute"].get(k, 0.0) for s in mine) / len(mine), 1)
        for k in kinds
    }
    summary: dict[str, Any] = {
        "tool": group.tool,
        "label": group.label,
        "slots": group.slots,
        "schedule": group.schedule,
        "provisioning": group.provisioning,
        "capacity": group.capacity,
        "key": group.key,
        "participants": group.count,
        "latency_s": common.summarize([s["latency_s"] for s in mine]),
        "ready_s": common.summarize([s["ready_s"] for s in mine]),
        "requests_per_minute_per_zone": per_zone,
        "requests_per_minute_per_slot": round(per_zone.get("total", 0.0) / group.slots, 1),
    }
    if group.slots > 1:
        every = [s["every_slot_latency_s"] for s in mine if s.get("every_slot_latency_s")]
        summary["every_slot_latency_s"] = common.summarize(every)
    if group.tool == "tpucared" and not group.policy:
        summary["within_budget"] = (
            summary["requests_per_minute_per_slot"] <= BUDGET_PER_SLOT
            and per_zone.get("total", 0.0) <= BUDGET_PER_FLEET_ZONE
        )
    return summary
