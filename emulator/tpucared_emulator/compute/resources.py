"""Compute Engine records (Instance, ZoneOperation, VmHost) and their compute v1 JSON renderings.

Mutable records owned by compute/book.py's `ComputeBook`; nothing here decides transitions.
`to_json()` renders the compute v1 shapes (docs/research/compute-engine.md sections 2.5, 4.1
and 5): `kind`, full-URL `selfLink` / `zone` / `machineType` / `targetLink`, uint64 ids as
strings, RFC 3339 times. An instance keeps the validated insert body (`spec`) and overlays what
the service owns (status, id, addresses, fingerprints).

`VmHost` is the instance as the simulated worker hosts (hosts/) see it: a one-worker `Node`
whose name is the instance's, whose metadata is the instance's `metadata.items` as a map (so
`ssh-keys` is honoured exactly as on TPU nodes) and whose `notice_at` is the preemption notice
its metadata server reports.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import json
from typing import Any

from tpucared_emulator import maintenance
from tpucared_emulator.catalog import MachineType
from tpucared_emulator.clock import rfc3339
from tpucared_emulator.compute.errors import OpError
from tpucared_emulator.resources import Node, region_of
from tpucared_emulator.workers import Worker

API = "https://www.googleapis.com/compute/v1"
UNPLACED = frozenset({"PENDING", "PROVISIONING"})  # no host (CPU platform, external IP) yet
# One count for every instance: a timer of a deleted instance never matches one recreated
# under the same name.
_GENERATIONS = itertools.count(1)


def zone_url(project: str, zone: str) -> str:
    return f"{API}/projects/{project}/zones/{zone}"


def metadata_map(spec: dict[str, Any]) -> dict[str, str]:
    """`metadata.items` [{key, value}] as a map (later keys win, as the guest agent reads)."""
    items = (spec.get("metadata") or {}).get("items") or []
    return {str(i["key"]): str(i.get("value", "")) for i in items}


@functools.lru_cache(maxsize=4096)
def _fingerprint_of(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()[:8]).decode()


def _fingerprint(value: object) -> str:
    """A stable short hash of a JSON value (fleets share metadata, labels and tags: cached)."""
    return _fingerprint_of(json.dumps(value, sort_keys=True))


class VmHost(Node):
    """A Compute Engine instance seen by the worker hosts: one worker, the instance's name."""

    __slots__ = ()

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}"

    @property
    def name(self) -> str:
        return f"{self.parent}/instances/{self.node_id}"


class Instance:
    """One incarnation of a Compute Engine instance."""

    def __init__(
        self,
        *,
        project: str,
        zone: str,
        name: str,
        spec: dict[str, Any],
        machine: MachineType,
        uid: int,
        create_time: float,
        worker: Worker,
        worker_id_source: str = "both",
    ) -> None:
        self.project = project
        self.group: str | None = None  # the key of the MIG it is a member of (compute/migs.py)
        self.zone = zone
        self.name = name
        self.spec = spec
        self.machine = machine
        self.uid = uid
        self.create_time = create_time
        self.worker = worker
        self.status = "PROVISIONING"
        self.status_message: str | None = None
        self.last_start: float | None = None
        self.last_stop: float | None = None
        self.doomed: OpError | None = None  # the insert can never succeed (no capacity)
        self.capacity_pending = False  # capacity judged when the insert ends
        self.holds_capacity = False
        self.insert_op: str | None = None  # operation names while they run
        self.delete_op: str | None = None
        self.preempting = False  # on its way out after a preemption (STOPPING)
        scheduling = spec.get("scheduling") or {}
        spot = scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))
        # Flex-start (compute/flex.py): PENDING until capacity, then a run of maxRunDuration
        # that ends at `run_ends_at` (rendered as scheduling.terminationTime).
        self.flex = scheduling.get("provisioningModel") == "FLEX_START"
        self.run_ends_at: float | None = None
        self.host = VmHost(
            project=project,
            zone=zone,
            node_id=name,
            spec={
                "metadata": metadata_map(spec),
                "schedulingConfig": {"spot": spot},
                "workerIdSource": worker_id_source,  # Node.metadata_attributes reads it
            },
            shape=machine.shape(),
            uid=uid,
            create_time=create_time,
            workers=[worker],
        )
        self.generation = next(_GENERATIONS)  # bumped on every change: older timers are stale
        self._json: tuple[tuple[object, ...], dict[str, Any]] | None = None
        self._prints: dict[str, str] | None = None  # the spec's fingerprints, made once

    def _fingerprints(self) -> dict[str, str]:
        """Fingerprints of what the spec holds: the spec never changes, so they are made
        once (re-rendering 10,000 instances after a change was mostly json.dumps)."""
        if self._prints is None:
            spec = self.spec
            prints = {
                "metadata": _fingerprint(spec.get("metadata") or {}),
                "labels": _fingerprint(spec.get("labels") or {}),
                "tags": _fingerprint(spec.get("tags") or {}),
            }
            for index, nic in enumerate(self._nics()):
                prints[f"nic{index}"] = _fingerprint(nic)
            self._prints = prints
        return self._prints

    def bump(self) -> None:
        self.generation = next(_GENERATIONS)

    @property
    def key(self) -> str:
        """The full resource name: `projects/p/zones/z/instances/n`."""
        return f"projects/{self.project}/zones/{self.zone}/instances/{self.name}"

    @property
    def self_link(self) -> str:
        return f"{API}/{self.key}"

    @property
    def spot(self) -> bool:
        return bool(self.host.spec["schedulingConfig"]["spot"])

    @property
    def termination_action(self) -> str:
        scheduling = self.spec.get("scheduling") or {}
        # STOP is the API's default action (research section 2.2).
        return "DELETE" if scheduling.get("instanceTerminationAction") == "DELETE" else "STOP"

    def record(self) -> dict[str, Any]:
        """What the persisted snapshot keeps of it (compute/book.py restores it)."""
        return {
            "project": self.project,
            "zone": self.zone,
            "spec": self.spec,
            "machine_type": self.machine.name,
            "uid": self.uid,
            "create_time": self.create_time,
            "status": self.status,
            "preempting": self.preempting,
            "last_start": self.last_start,
            "last_stop": self.last_stop,
            "ip": self.worker.ip,
            "host_key": self.worker.host_key.export_private_key("openssh").decode(),
        }

    @property
    def metadata(self) -> dict[str, str]:
        metadata: dict[str, str] = self.host.spec["metadata"]
        return metadata

    def to_json(self) -> dict[str, Any]:
        """The API resource, rendered again only after a change (lists are polled often; the
        dict is shared between calls and never changed in place)."""
        window = self.host.maintenance  # shown as the clock stands (emulator/maintenance.py)
        key = (self.generation, window, None if window is None else window.status())
        if self._json is not None and self._json[0] == key:
            return self._json[1]
        out = self._render()
        self._json = (key, out)
        return out

    def _resource_status(self) -> dict[str, Any]:
        """`resourceStatus` (output only): a run's planned end and the announced maintenance."""
        out: dict[str, Any] = {}
        if self.run_ends_at is not None:
            # Where Google reports a run's planned end: output only, beside the intent
            # (`scheduling.terminationTime` is an input, echoed only if the body had it):
            # compute/docs/instances/limit-vm-runtime, ResourceStatusScheduling.
            out["scheduling"] = {"terminationTimestamp": rfc3339(self.run_ends_at)}
        if (upcoming := maintenance.shown(self.host.maintenance)) is not None:
            out["upcomingMaintenance"] = upcoming  # ResourceStatus.upcomingMaintenance
        return out

    def _render(self) -> dict[str, Any]:
        spec = self.spec
        prints = self._fingerprints()
        zone = zone_url(self.project, self.zone)
        out: dict[str, Any] = {
            "kind": "compute#instance",
            "id": str(self.uid),
            "creationTimestamp": rfc3339(self.create_time),
            "name": self.name,
            "machineType": f"{zone}/machineTypes/{self.machine.name}",
            "status": self.status,
            "zone": zone,
            "canIpForward": bool(spec.get("canIpForward", False)),
            "networkInterfaces": [self._nic(i, n) for i, n in enumerate(self._nics())],
            "disks": [self._disk(i, d) for i, d in enumerate(spec.get("disks") or [])],
            "metadata": {
                "kind": "compute#metadata",
                "fingerprint": prints["metadata"],
                **({"items": spec["metadata"]["items"]} if self.metadata else {}),
            },
            "selfLink": self.self_link,
            "scheduling": {"automaticRestart": not (self.spot or self.flex),
                           "onHostMaintenance": "TERMINATE", "preemptible": False,
                           **(spec.get("scheduling") or {})},
            "cpuPlatform": "Unknown CPU Platform" if self.status in UNPLACED else "AMD Turin",
            "labelFingerprint": prints["labels"],
            "startRestricted": False,
            "deletionProtection": False,
            "fingerprint": _fingerprint_of(f"{self.uid}/{self.status}"),
        }  # fmt: skip
        if self.status_message:
            out["statusMessage"] = self.status_message
        if status := self._resource_status():
            out["resourceStatus"] = status
        for key in (
            "description",
            "labels",
            "serviceAccounts",
            "reservationAffinity",
            "resourcePolicies",
            "advancedMachineFeatures",
            "params",
            "hostname",
        ):
            if spec.get(key):
                out[key] = spec[key]  # fmt: skip
        tags = spec.get("tags") or {}
        out["tags"] = {"fingerprint": prints["tags"], **tags}
        if self.last_start is not None:
            out["lastStartTimestamp"] = rfc3339(self.last_start)
        if self.last_stop is not None:
            out["lastStopTimestamp"] = rfc3339(self.last_stop)
        return out

    def _nics(self) -> list[dict[str, Any]]:
        return list(self.spec.get("networkInterfaces") or [{}])

    def _nic(self, index: int, nic: dict[str, Any]) -> dict[str, Any]:
        region = region_of(self.zone)
        network = nic.get("network") or "global/networks/default"
        subnetwork = nic.get("subnetwork") or f"regions/{region}/subnetworks/default"
        out: dict[str, Any] = {
            "kind": "compute#networkInterface",
            "network": _full(self.project, network),
            "subnetwork": _full(self.project, subnetwork),
            "name": f"nic{index}",
            "fingerprint": self._fingerprints()[f"nic{index}"],
            "stackType": nic.get("stackType", "IPV4_ONLY"),
        }
        if index == 0:
            out["networkIP"] = self.worker.ip  # where the simulated SSH server listens
        configs = []
        for config in nic.get("accessConfigs") or []:
            rendered = {"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT",
                        "name": "External NAT", "networkTier": "PREMIUM", **config}  # fmt: skip
            if index == 0 and self.status not in UNPLACED | {"TERMINATED"}:
                rendered["natIP"] = self.worker.ip  # loopback is both sides' address here
            configs.append(rendered)
        if configs:
            out["accessConfigs"] = configs
        if nic.get("nicType"):
            out["nicType"] = nic["nicType"]
        return out

    def _disk(self, index: int, disk: dict[str, Any]) -> dict[str, Any]:
        params = disk.get("initializeParams") or {}
        name = params.get("diskName") or (self.name if index == 0 else f"{self.name}-{index}")
        out: dict[str, Any] = {
            "kind": "compute#attachedDisk",
            "type": disk.get("type", "PERSISTENT"),
            "mode": disk.get("mode", "READ_WRITE"),
            "source": disk.get("source") or f"{zone_url(self.project, self.zone)}/disks/{name}",
            "deviceName": disk.get("deviceName") or f"persistent-disk-{index}",
            "index": index,
            "boot": bool(disk.get("boot", False)),
            "autoDelete": bool(disk.get("autoDelete", False)),
            "interface": "NVME",
        }
        if params.get("diskSizeGb"):
            out["diskSizeGb"] = str(params["diskSizeGb"])
        return out


def _full(project: str, path: str) -> str:
    """A partial URL (`global/networks/default`, `projects/p/...`) as the API shows it."""
    if path.startswith("https://"):
        return path
    if path.startswith("projects/"):
        return f"{API}/{path}"
    return f"{API}/projects/{project}/{path}"


class ZoneOperation:
    """An operation (`compute#operation`): zonal, or regional / global with `scope`
    (`regions/r`, `global`) for the resources that live there (compute/shared.py)."""

    def __init__(
        self,
        *,
        project: str,
        zone: str,
        name: str,
        uid: int,
        operation_type: str,
        target_link: str,
        target_id: int,
        user: str,
        insert_time: float,
        request_id: str | None = None,
        scope: str | None = None,
    ) -> None:
        self.project = project
        self.zone = zone
        self.scope = scope or f"zones/{zone}"
        self.name = name
        self.uid = uid
        self.operation_type = operation_type
        self.target_link = target_link
        self.target_id = target_id
        self.user = user
        self.insert_time = insert_time
        self.request_id = request_id
        self.status = "RUNNING"
        self.end_time: float | None = None
        self.error: OpError | None = None
        self.status_message: str | None = None

    @property
    def done(self) -> bool:
        return self.status == "DONE"

    def finish(self, now: float, error: OpError | None = None) -> None:
        if self.done:
            return
        self.status = "DONE"
        self.end_time = now
        self.error = error

    @property
    def key(self) -> str:
        return f"projects/{self.project}/{self.scope}/operations/{self.name}"

    def to_json(self) -> dict[str, Any]:
        scope = f"{API}/projects/{self.project}/{self.scope}"
        out: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(self.uid),
            "name": self.name,
            "operationType": self.operation_type,
            "targetLink": self.target_link,
            "targetId": str(self.target_id),
            "status": self.status,
            "user": self.user,
            "progress": 100 if self.done else 0,
            "insertTime": rfc3339(self.insert_time),
            "startTime": rfc3339(self.insert_time),
            "selfLink": f"{scope}/operations/{self.name}",
        }
        if self.scope != "global":
            out["zone" if self.scope.startswith("zones/") else "region"] = scope
        if self.request_id:
            out["clientOperationId"] = self.request_id
        if self.status_message:
            out["statusMessage"] = self.status_message
        if self.end_time is not None:
            out["endTime"] = rfc3339(self.end_time)
        if self.error is not None:
            out.update(self.error.fields())
        return out
