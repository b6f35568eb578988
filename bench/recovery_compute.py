"""Recovery of a Compute Engine fleet (issue 27), measured beside the TPU API fleet in the
same run of bench/recovery.py (`--variant compute` runs it alone).

Method. The same emulator (one process, one clock, the same stated delete and create times,
the same per-sample create spread and stratified preemption moments: the variant draws from
its own generator seeded like the single slice's, so sample i of both falls at the same
point of the poll cycle with the same create time) and the same real daemon process, with
one `[[fleet]] api = "compute"` slot instead: a spot `tpu7x-standard-4t` VM (one host, so one
worker) in us-central1-c, `on_preemption = "stop"` (the default: a preempted VM turns
STOPPING, then TERMINATED after the stated delete time, keeping its name until the daemon
deletes it). The instance is preempted through the emulator with no notice (the control
API's `:preempt`, which also records the `compute.instances.preempted` zone operation), and
the components are read as for a TPU node: the daemon's DELETE of the instance and its
insert (`POST .../instances`) in the request log, the daemon's delete operation and the
insert operation (whose end is the instance RUNNING) from the emulator's zone operations,
the worker's start stamp. The compute figures are set beside the single slice's at the same
poll interval as ratios of the medians and of the p90s (compute / TPU).

Caveat: the TPU API slot is a v4-32 of 4 workers and the Compute Engine slot a single host,
so `ready_to_run` (SSH, setup and launch on every worker) is not like for like; detection,
delete, wait_create and create are.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import common
from bench import recovery_rig as rig
from bench.recovery_rig import Cloud, DaemonProcess, Settings

ZONE = "us-central1-c"
MACHINE = "tpu7x-standard-4t"
WORKERS = 1
NODE = f"{rig.FLEET}-0"
FLEET_KEYS: dict[str, Any] = {
    "api": "compute",
    "zones": [ZONE],
    "accelerator_type": None,
    "runtime_version": None,
    "machine_type": MACHINE,
    "on_preemption": "stop",
}
# compute / TPU, per component: medians and p90s
RATIOS = ("detection", "delete", "wait_create", "create", "ready_to_run", "total", "overhead")


def parameters() -> dict[str, Any]:
    return {"machine_type": MACHINE, "zone": ZONE, "workers": WORKERS, "on_preemption": "stop"}


def _instance_of(request: Mapping[str, Any]) -> str | None:
    """The instance a DELETE is about; an insert carries its name in the body, which the
    request log does not keep: the one slot makes every insert ours."""
    path = str(request["path"])
    if "/compute/v1/" not in path:
        return None
    if request["method"] == "DELETE" and "/instances/" in path:
        return path.rsplit("/", 1)[1]
    if request["method"] == "POST" and path.endswith("/instances"):
        return NODE
    return None


def _operation_end(
    operations: list[dict[str, Any]], kind: str, after: float, node: str = NODE
) -> float:
    """The end of the daemon's first `kind` operation ("insert", "delete") on `node`
    inserted at or after `after` (the service's own records, user "system", are skipped)."""
    found = [
        (op["insert"], op["end"])
        for op in operations
        if op["type"] == kind
        and op["user"] != "system"
        and str(op["target"]).endswith(f"/instances/{node}")
        and op["insert"] >= after - 0.001
        and op["end"] is not None
    ]
    if not found:
        raise RuntimeError(f"benchmark: no finished {kind} operation of {node} after {after}")
    return float(min(found)[1])


def measure(
    cloud: Cloud, daemon: DaemonProcess, results: Path, attempt: int, preempted: float
) -> tuple[dict[str, float], str]:
    running = common.wait_until(
        lambda: rig.running_everywhere(results, attempt + 1, WORKERS),
        180,
        f"attempt {attempt + 1} on the instance",
    )
    requests = cloud.requests(preempted - 0.001)
    operations = cloud.compute_operations()
    deleted_at = min(
        r["time"] for r in requests if r["method"] == "DELETE" and _instance_of(r) == NODE
    )
    delete_done = _operation_end(operations, "delete", deleted_at)
    created_at = min(
        r["time"]
        for r in requests
        if r["method"] == "POST" and _instance_of(r) == NODE and r["status"] == 200
        and r["time"] >= delete_done
    )  # fmt: skip
    ready = _operation_end(operations, "insert", created_at)
    sample = rig.components(preempted, deleted_at, delete_done, created_at, ready, running)
    events = daemon.events(preempted - 1.0)
    sample.update(rig.ready_to_run_detail([e for e in events if e["t"] >= ready], ready, running))
    return sample, rig.woken_by(events, preempted)


def measure_poll(
    cloud: Cloud,
    scratch: Path,
    poll: float,
    settings: Settings,
    rng: random.Random,
    log: Callable[[str], None],
    root: Path = rig.ROOT,
) -> dict[str, Any]:
    cloud.reset(settings.create_seconds)
    results = scratch / f"results-compute-{poll:g}"
    results.mkdir(parents=True)
    daemon = DaemonProcess(
        scratch / f"daemon-compute-{poll:g}", cloud, poll=poll, results=results, root=root,
        fleet_keys=FLEET_KEYS,
    )  # fmt: skip
    try:
        common.wait_until(
            lambda: rig.running_everywhere(results, 1, WORKERS), 120, "attempt 1 on the instance"
        )
        rows, woken = rig.sample_poll(
            cloud, daemon, results, poll=poll, settings=settings, rng=rng, node=NODE,
            newest=lambda r: rig.newest_attempt(r, WORKERS), measure=measure,
            label="recovery compute", shown=rig.COMPONENTS, log=log,
            preempt=lambda node: cloud.preempt_instance(node, ZONE),
        )  # fmt: skip
    finally:
        daemon.stop()
    names = [*rig.COMPONENTS, "total", "overhead", *rig.DETAIL]
    summary = {}
    for k in names:
        values = [r[k] for r in rows if k in r]
        summary[k] = common.summarize(values)
        if values:
            summary[k]["p90"] = round(common.percentile(values, 90), 4)
    return {
        "poll_interval_s": poll,
        "samples": len(rows),
        "components_s": summary,
        "delete_tick_reasons": dict(Counter(woken)),
        "raw": rows,
    }


def _p90(summary: Mapping[str, Any]) -> float | None:
    samples = summary.get("samples")
    return round(common.percentile(samples, 90), 4) if samples else None


def versus_tpu(tpu: Mapping[str, Any], compute: Mapping[str, Any]) -> dict[str, Any]:
    """Compute / TPU API at one poll interval, per component: medians and p90s."""
    out: dict[str, Any] = {"poll_interval_s": compute["poll_interval_s"]}
    for name in RATIOS:
        a, b = compute["components_s"][name], tpu["components_s"][name]
        out[name] = {
            "tpu_median": b.get("median"),
            "compute_median": a.get("median"),
            "ratio_median": common.ratio(a.get("median"), b.get("median")),
            "tpu_p90": _p90(b),
            "compute_p90": _p90(a),
            "ratio_p90": common.ratio(_p90(a), _p90(b)),
        }
    return out


def render(part: Mapping[str, Any], table: Callable[[Mapping[str, Any]], str]) -> list[str]:
    blocks = []
    p = part["parameters"]
    for r in part["recovery"]:
        title = (
            f"Compute Engine: 1 x {p['machine_type']} spot (on_preemption {p['on_preemption']}),"
            f" poll {r['poll_interval_s']:g}s"
        )
        blocks.append(title + "\n" + table(r["components_s"]))
    for v in part["versus_tpu"]:
        cells = []
        for k in RATIOS:
            median, p90 = v[k]["ratio_median"], v[k]["ratio_p90"]
            cells.append(f"{k} {common.format_ratio(median)} / {common.format_ratio(p90)}")
        blocks.append(
            f"Compute Engine / TPU API at poll {v['poll_interval_s']:g}s (median / p90): "
            + ", ".join(cells)
        )
    return blocks
