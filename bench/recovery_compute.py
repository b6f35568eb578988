"""Recovery of Compute Engine fleets (issues 27 and 28), measured beside the TPU API fleet in
the same run of bench/recovery.py (`--variant compute` / `compute_slice` runs one alone).

Method. The same emulator (one process, one clock, the same stated delete and create times,
the same per-sample create spread and stratified preemption moments: each variant draws from
its own generator seeded like the single slice's, so sample i of each falls at the same
point of the poll cycle with the same create time) and the same real daemon process, with
one `[[fleet]] api = "compute"` slot instead, in us-central1-c, spot, `on_preemption =
"stop"` (the default: a preempted VM turns STOPPING, then TERMINATED after the stated delete
time, keeping its name until deleted):
- "compute" (issue 27): one `tpu7x-standard-4t` VM (one host, so one worker). The instance is
  preempted; the components are read from the daemon's DELETE of the instance and its
  insert (`POST .../instances`) in the request log, the delete operation and the insert
  operation (whose end is the instance RUNNING) from the emulator's zone operations, and the
  worker's start stamp.
- "compute_slice" (issue 28): one 4-host `tpu7x-standard-4t` slice (topology 2x2x4), a
  managed instance group of 4 VMs with a workload policy, so 4 workers like the TPU API's
  v4-32. One VM of it is preempted (with no notice, the control API's `:preempt`, which also
  records the `compute.instances.preempted` zone operation); the daemon deletes the whole group
  and makes it again. The delete is the group's (`DELETE .../instanceGroupManagers/NAME`, done
  once its VMs are gone), the create is the group's insert, and the slice is ready when the
  last of its VMs' insert operations ends (RUNNING).
Each is set beside the single TPU API slice's figures at the same poll interval as ratios
of the medians and of the p90s (compute / TPU).

Caveat: for "compute" the TPU API slot is a v4-32 of 4 workers and the Compute Engine slot a
single host, so `ready_to_run` (SSH, setup and launch on every worker) is not like for like;
detection, delete, wait_create and create are. "compute_slice" has 4 workers like the v4-32.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bench import common
from bench import recovery_rig as rig
from bench.recovery_rig import Cloud, DaemonProcess, Settings

ZONE = "us-central1-c"
MACHINE = "tpu7x-standard-4t"
NODE = f"{rig.FLEET}-0"
# compute / TPU, per component: medians and p90s
RATIOS = ("detection", "delete", "wait_create", "create", "ready_to_run", "total", "overhead")


@dataclass(frozen=True)
class Shape:
    """One Compute Engine variant: its fleet keys, its workers, and the resource its slot is."""

    variant: str  # bench/recovery.py's name of it, and its key in the result
    workers: int
    topology: str | None  # None: one VM, an instance; else a MIG of `workers` VMs
    resource: str  # the collection the slot's node is in: "instances" / "instanceGroupManagers"

    @property
    def fleet_keys(self) -> dict[str, Any]:
        keys: dict[str, Any] = {
            "api": "compute",
            "zones": [ZONE],
            "accelerator_type": None,
            "runtime_version": None,
            "machine_type": MACHINE,
            "on_preemption": "stop",
        }
        if self.topology is not None:
            keys["topology"] = self.topology
        return keys

    @property
    def preempted(self) -> str:
        """The VM preempted: the instance, or the slice's first VM (`{mig}-w-001`)."""
        return NODE if self.topology is None else f"{NODE}-w-001"

    def title(self) -> str:
        if self.topology is None:
            return f"1 x {MACHINE} spot"
        return f"1 x {MACHINE} {self.topology} slice ({self.workers} VMs) spot"


VM = Shape("compute", workers=1, topology=None, resource="instances")
SLICE = Shape("compute_slice", workers=4, topology="2x2x4", resource="instanceGroupManagers")
SHAPES = {s.variant: s for s in (VM, SLICE)}


def parameters(shape: Shape = VM) -> dict[str, Any]:
    return {
        "machine_type": MACHINE,
        "topology": shape.topology,
        "zone": ZONE,
        "workers": shape.workers,
        "on_preemption": "stop",
    }


def _of(request: Mapping[str, Any], shape: Shape) -> bool:
    """Whether a request is the daemon's DELETE or insert of the slot's node (an insert
    carries its name in the body, which the request log does not keep: the one slot makes
    every insert of the collection ours)."""
    path = str(request["path"])
    if "/compute/v1/" not in path:
        return False
    if request["method"] == "DELETE":
        return path.endswith(f"/{shape.resource}/{NODE}")
    return request["method"] == "POST" and path.endswith(f"/{shape.resource}")


def _operation_ends(
    operations: list[dict[str, Any]], kind: str, after: float, target: str
) -> list[tuple[float, float]]:
    """(insert, end) of the finished `kind` operations ("insert", "delete") whose target
    ends with `target`, inserted at or after `after` (the service's own records, user
    "system", are skipped)."""
    return sorted(
        (op["insert"], op["end"])
        for op in operations
        if op["type"] == kind
        and op["user"] != "system"
        and str(op["target"]).endswith(target)
        and op["insert"] >= after - 0.001
        and op["end"] is not None
    )


def _first_end(operations: list[dict[str, Any]], kind: str, after: float, target: str) -> float:
    found = _operation_ends(operations, kind, after, target)
    if not found:
        raise RuntimeError(f"benchmark: no finished {kind} operation of {target} after {after}")
    return float(found[0][1])


def _ready(operations: list[dict[str, Any]], created_at: float, shape: Shape) -> float:
    """When the new node was up: its insert's end, or the last of the slice's VMs' inserts."""
    if shape.topology is None:
        return _first_end(operations, "insert", created_at, f"/instances/{NODE}")
    members = {
        target: end
        for op in operations
        if op["type"] == "insert" and op["user"] != "system" and op["insert"] >= created_at
        for target, end in [(str(op["target"]), op["end"])]
        if f"/instances/{NODE}-w-" in target
    }
    if len(members) < shape.workers or None in members.values():
        raise RuntimeError(f"benchmark: the slice's {shape.workers} VMs were not all made")
    return float(max(members.values()))


def measure(
    cloud: Cloud,
    daemon: DaemonProcess,
    results: Path,
    attempt: int,
    preempted: float,
    shape: Shape = VM,
) -> tuple[dict[str, float], str]:
    running = common.wait_until(
        lambda: rig.running_everywhere(results, attempt + 1, shape.workers),
        180,
        f"attempt {attempt + 1} on the {shape.variant} slot",
    )
    requests = cloud.requests(preempted - 0.001)
    operations = cloud.compute_operations()
    target = f"/{shape.resource}/{NODE}"
    deleted_at = min(r["time"] for r in requests if r["method"] == "DELETE" and _of(r, shape))
    delete_done = _first_end(operations, "delete", deleted_at, target)
    created_at = min(
        r["time"]
        for r in requests
        if r["method"] == "POST" and _of(r, shape) and r["status"] == 200
        and r["time"] >= delete_done
    )  # fmt: skip
    ready = _ready(operations, created_at, shape)
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
    shape: Shape = VM,
) -> dict[str, Any]:
    cloud.reset(settings.create_seconds)
    results = scratch / f"results-{shape.variant}-{poll:g}"
    results.mkdir(parents=True)
    daemon = DaemonProcess(
        scratch / f"daemon-{shape.variant}-{poll:g}", cloud, poll=poll, results=results,
        root=root, fleet_keys=shape.fleet_keys,
    )  # fmt: skip
    try:
        common.wait_until(
            lambda: rig.running_everywhere(results, 1, shape.workers),
            120,
            f"attempt 1 on the {shape.variant} slot",
        )
        rows, woken = rig.sample_poll(
            cloud, daemon, results, poll=poll, settings=settings, rng=rng, node=NODE,
            newest=lambda r: rig.newest_attempt(r, shape.workers),
            measure=partial(measure, shape=shape), label=f"recovery {shape.variant}",
            shown=rig.COMPONENTS, log=log,
            preempt=lambda _node: cloud.preempt_instance(shape.preempted, ZONE),
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
    shape = SHAPES["compute" if p.get("topology") is None else "compute_slice"]
    for r in part["recovery"]:
        title = (
            f"Compute Engine: {shape.title()} (on_preemption {p['on_preemption']}),"
            f" poll {r['poll_interval_s']:g}s"
        )
        blocks.append(title + "\n" + table(r["components_s"]))
    for v in part["versus_tpu"]:
        cells = []
        for k in RATIOS:
            median, p90 = v[k]["ratio_median"], v[k]["ratio_p90"]
            cells.append(f"{k} {common.format_ratio(median)} / {common.format_ratio(p90)}")
        blocks.append(
            f"Compute Engine {shape.variant} / TPU API at poll {v['poll_interval_s']:g}s "
            "(median / p90): " + ", ".join(cells)
        )
    return blocks
