"""Optional JSON snapshot of the emulated cloud, so `tpucared emulator --state-file` survives a
restart the way a real project does: nodes and Compute Engine instances (with their ids,
addresses and host keys; the instances through vm_hook.py's `VmBook`), Compute Engine's managed
instance groups, templates and workload policies, and capacity limits come back; operations,
queued resources and faults do not.

Loaded once at start, written once at stop (atomically: a temporary file, then rename).
A node that was mid-transition (CREATING, DELETING, ...) resumes it with the full delay.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import asyncssh
import structlog

from tpucared_emulator.resources import Node
from tpucared_emulator.state import EmulatorState
from tpucared_emulator.topology import parse_accelerator_type
from tpucared_emulator.workers import Worker

log = structlog.get_logger(__name__)

VERSION = 1


def _node_to_json(node: Node) -> dict[str, Any]:
    return {
        "project": node.project,
        "zone": node.zone,
        "node_id": node.node_id,
        "spec": node.spec,
        "accelerator_type": node.accelerator_type,
        "uid": node.uid,
        "create_time": node.create_time,
        "state": node.state,
        "health": node.health,
        "health_description": node.health_description,
        "doomed": node.doomed,
        "capacity_pending": node.capacity_pending,
        "workers": [
            {
                "index": w.index,
                "ip": w.ip,
                "host_key": w.host_key.export_private_key("openssh").decode(),
            }
            for w in node.workers
        ],
    }


def _node_from_json(data: dict[str, Any]) -> Node:
    workers = []
    for raw in data["workers"]:
        worker = Worker(int(raw["index"]), str(raw["ip"]))
        worker.host_key = asyncssh.import_private_key(raw["host_key"])
        workers.append(worker)
    node = Node(
        project=data["project"],
        zone=data["zone"],
        node_id=data["node_id"],
        spec=data["spec"],
        shape=parse_accelerator_type(data["accelerator_type"]),
        uid=int(data["uid"]),
        create_time=float(data["create_time"]),
        workers=workers,
    )
    node.state = data["state"]
    node.health = data["health"]
    node.health_description = data["health_description"]
    node.doomed = data["doomed"]
    node.capacity_pending = bool(data.get("capacity_pending", False))
    return node


def save_state(state: EmulatorState, path: str | os.PathLike[str]) -> None:
    nodes = [_node_to_json(n) for n in state.all_nodes()]
    instances = state.vms.snapshot()
    snapshot = {
        "version": VERSION,
        "capacity": [
            [c["zone"], c.get("accelerator_type") or c["machine_type"], c["available"]]
            for c in state.capacity()
            if c["available"] is not None
        ],
        "nodes": nodes,
        "instances": instances,
        "groups": state.vms.snapshot_groups(),
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(snapshot, handle)
    os.replace(tmp, target)
    log.info(
        "emulator.state_saved",
        path=str(target),
        nodes=len(nodes),
        instances=len(instances),
    )


def load_state(state: EmulatorState, path: str | os.PathLike[str]) -> None:
    source = Path(path)
    if not source.exists():
        return
    snapshot = json.loads(source.read_text())
    if snapshot.get("version") != VERSION:
        raise ValueError(f"{source}: unsupported emulator state version {snapshot.get('version')}")
    for zone, accelerator_type, available in snapshot.get("capacity", []):
        state.set_capacity(zone, accelerator_type, available)
    for raw in snapshot.get("nodes", []):
        state.adopt(_node_from_json(raw))
    state.vms.restore(snapshot.get("instances", []))
    state.vms.restore_groups(snapshot.get("groups", {}))
    log.info(
        "emulator.state_loaded",
        path=str(source),
        nodes=len(snapshot.get("nodes", [])),
        instances=len(snapshot.get("instances", [])),
    )
