"""The emulator's resources (Node, Operation, QueuedResource) and their v2 JSON renderings.

Mutable records owned by `state.EmulatorState`; nothing here decides transitions. `to_json()`
renders the exact v2 shape (camelCase, enum names, int64 as strings, output-only fields filled
in, unset fields omitted as proto3 JSON does). A node keeps the normalized request body it was
created from (`spec`) and overlays what the service owns (state, endpoints, id, times).
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

from tpucared_emulator import maintenance
from tpucared_emulator.clock import rfc3339
from tpucared_emulator.maintenance import MaintenanceRun, Window
from tpucared_emulator.topology import AcceleratorShape
from tpucared_emulator.workers import TPU_RUNTIME_PORT, Worker

TYPE_URL = "type.googleapis.com/google.cloud.tpu.v2."
EMPTY_TYPE = "type.googleapis.com/google.protobuf.Empty"


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


_GENERATIONS = itertools.count()


class Node:
    __slots__ = (
        "_json",
        "accelerator_type",
        "capacity_pending",
        "create_op",
        "create_time",
        "doomed",
        "generation",
        "health",
        "health_description",
        "host_maintenance",
        "maintenance",
        "multislice_node",
        "node_id",
        "notice_at",
        "project",
        "queued_resource",
        "shape",
        "spec",
        "spec_rev",
        "state",
        "uid",
        "workers",
        "zone",
    )

    def __init__(
        self,
        *,
        project: str,
        zone: str,
        node_id: str,
        spec: dict[str, Any],
        shape: AcceleratorShape,
        uid: int,
        create_time: float,
        workers: list[Worker],
    ) -> None:
        self.project = project
        self.zone = zone
        self.node_id = node_id
        self.spec = spec  # normalized create body, updated by patch
        self.shape = shape
        self.accelerator_type = shape.name
        self.uid = uid
        self.create_time = create_time
        self.workers = workers
        self.state = "CREATING"
        self.health: str | None = None
        self.health_description: str | None = None
        self.queued_resource: str | None = None  # the full name of the one that made it
        self.multislice_node = False  # made by a queued resource's multisliceParams
        # Set when the create can never succeed (no capacity): the error its operation gets.
        self.doomed: dict[str, Any] | None = None
        # capacity_judged "end": capacity is taken (or the create doomed) when it finishes.
        self.capacity_pending = False
        # When the preemption notice came (instance/preempted is TRUE); None: no notice.
        self.notice_at: float | None = None
        # The host maintenance a control call announced (emulator/maintenance.py), or None.
        self.maintenance: Window | None = None
        # What that maintenance does to it (notice, termination, return), once it does.
        self.host_maintenance: MaintenanceRun | None = None
        self.create_op: str | None = None  # name of the create operation while it runs
        # Changed on every state change; timers scheduled for an older generation are stale.
        # Drawn from one count for all nodes, so a timer of a deleted node never matches a
        # node recreated under the same name.
        self.generation = next(_GENERATIONS)
        self.spec_rev = 0  # bumped whenever `spec` is changed in place (nodes.patch)
        self._json: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    def bump(self) -> None:
        """A state change: every timer scheduled before it is stale."""
        self.generation = next(_GENERATIONS)

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"

    @property
    def name(self) -> str:
        return f"{self.parent}/nodes/{self.node_id}"

    @property
    def scheduling(self) -> dict[str, bool]:
        config: dict[str, bool] = self.spec.get("schedulingConfig", {})
        return config

    @property
    def preemptible(self) -> bool:
        return bool(self.scheduling.get("preemptible") or self.scheduling.get("spot"))

    @property
    def external_ips(self) -> bool:
        # The API default is false; gcloud sends true unless --internal-ips.
        return bool(self.spec.get("networkConfig", {}).get("enableExternalIps"))

    def metadata_attributes(self, index: int) -> dict[str, str]:
        """What worker `index`'s metadata server lists under `instance/attributes/`: the
        node's metadata, and the worker id as a TPU VM's guest sees it (`agent-worker-number`,
        `tpu-env`'s WORKER_ID). `workerIdSource` in the spec (Compute Engine VMs, an emulator
        option) keeps one of the two, or neither."""
        attributes = {str(k): str(v) for k, v in (self.spec.get("metadata") or {}).items()}
        source = self.spec.get("workerIdSource", "both")
        if source in ("both", "agent-worker-number"):
            attributes.setdefault("agent-worker-number", str(index))
        if source in ("both", "tpu-env"):
            env = (
                f"ACCELERATOR_TYPE: '{self.accelerator_type}'\n"
                f"TOPOLOGY: '{self.shape.topology}'\nWORKER_ID: '{index}'\n"
            )
            attributes.setdefault("tpu-env", env)
        return attributes

    def to_json(self) -> dict[str, Any]:
        """The API resource. Rendered again only when something it shows changed: a list of
        10,000 nodes every poll is the emulator's main work in the scale benchmark. The dict
        is shared between calls: callers copy it before changing it (none does)."""
        window = self.maintenance  # shown as the clock stands: PENDING, ONGOING, gone
        key = (self.state, self.health, self.health_description, self.queued_resource,
               self.multislice_node, self.spec_rev, window,
               None if window is None else window.status())  # fmt: skip
        if self._json is not None and self._json[0] == key:
            return self._json[1]
        out = self._render()
        self._json = (key, out)
        return out

    def _render(self) -> dict[str, Any]:
        spec = self.spec
        out: dict[str, Any] = {
            "name": self.name,
            "acceleratorType": self.accelerator_type,
            "state": self.state,
            "runtimeVersion": spec.get("runtimeVersion", ""),
            "networkConfig": {
                "network": f"projects/{self.project}/global/networks/default",
                "subnetwork": (
                    f"projects/{self.project}/regions/{region_of(self.zone)}/subnetworks/default"
                ),
                **spec.get("networkConfig", {}),
            },
        }
        for key in ("cidrBlock", "serviceAccount"):
            if key in spec:
                out[key] = spec[key]
        out["createTime"] = rfc3339(self.create_time)
        if "schedulingConfig" in spec:
            out["schedulingConfig"] = spec["schedulingConfig"]
        if self.state != "CREATING":
            out["networkEndpoints"] = [self._endpoint(w) for w in self.workers]
        if self.health:
            out["health"] = self.health
        if self.health_description:
            out["healthDescription"] = self.health_description
        for key in ("labels", "metadata"):
            if spec.get(key):
                out[key] = spec[key]
        out["id"] = str(self.uid)
        out["apiVersion"] = "V2"
        for key in (
            "tags",
            "description",
            "acceleratorConfig",
            "dataDisks",
            "shieldedInstanceConfig",
            "networkConfigs",
        ):
            if spec.get(key):
                out[key] = spec[key]
        if self.queued_resource:
            out["queuedResource"] = self.queued_resource
        if self.multislice_node:  # proto3 JSON omits false
            out["multisliceNode"] = True
        if (upcoming := maintenance.shown(self.maintenance)) is not None:
            out["upcomingMaintenance"] = upcoming  # Node.upcomingMaintenance, output only
        return out

    def _endpoint(self, worker: Worker) -> dict[str, Any]:
        endpoint: dict[str, Any] = {"ipAddress": worker.ip, "port": TPU_RUNTIME_PORT}
        if self.external_ips:
            endpoint["accessConfig"] = {"externalIp": worker.ip}
        return endpoint

    def maintenance_event(self, worker_index: int) -> str:
        """`instance/maintenance-event` as that worker's metadata server answers it."""
        run = self.host_maintenance
        return maintenance.EVENT_NONE if run is None else run.event_value(worker_index)

    def internal_json(self) -> dict[str, Any]:
        """The control API's view: the API resource plus what only the emulator knows."""
        run = self.host_maintenance
        return {
            "project": self.project,
            "zone": self.zone,
            "node_id": self.node_id,
            "name": self.name,
            "state": self.state,
            "health": self.health,
            "accelerator_type": self.accelerator_type,
            "doomed": self.doomed is not None,
            "notice_at": self.notice_at,
            "maintenance": maintenance.shown(self.maintenance),
            # What maintenance is doing to it (maintenance_run.py): each worker's
            # instance/maintenance-event, and whether it is down for the maintenance.
            "maintenance_event": [self.maintenance_event(w.index) for w in self.workers],
            "maintenance_down": run is not None and run.down,
            "workers": [
                {"index": w.index, "ip": w.ip, "host_key": w.host_public_key} for w in self.workers
            ],
            "node": self.to_json(),
        }


class Operation:
    __slots__ = (
        "create_time",
        "done",
        "end_time",
        "error",
        "name",
        "response",
        "target",
        "verb",
    )

    def __init__(self, *, name: str, target: str, verb: str, create_time: float) -> None:
        self.name = name
        self.target = target
        self.verb = verb
        self.create_time = create_time
        self.end_time: float | None = None
        self.done = False
        self.error: dict[str, Any] | None = None
        self.response: dict[str, Any] | None = None

    @property
    def parent(self) -> str:
        return self.name.rsplit("/operations/", 1)[0]

    def finish(
        self,
        now: float,
        *,
        response: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        if self.done:
            return
        self.done = True
        self.end_time = now
        self.error = error
        self.response = None if error else (response or {"@type": EMPTY_TYPE})

    def to_json(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "@type": TYPE_URL + "OperationMetadata",
            "createTime": rfc3339(self.create_time),
        }
        if self.end_time is not None:
            metadata["endTime"] = rfc3339(self.end_time)
        metadata.update(target=self.target, verb=self.verb, apiVersion="v2")
        out: dict[str, Any] = {"name": self.name, "metadata": metadata}
        if self.done:  # proto3 JSON omits `done: false`
            out["done"] = True
            if self.error is not None:
                out["error"] = self.error
            else:
                out["response"] = self.response
        return out


class NodeRequest(NamedTuple):
    """A node a queued resource asks for."""

    node_id: str
    spec: dict[str, Any]  # the normalized node spec (shared by a multislice request's nodes)
    shape: AcceleratorShape
    multislice: bool  # one of the nodes of a nodeSpec's multisliceParams


class QueuedResource:
    __slots__ = (
        "create_time",
        "failed_error",
        "generation",
        "node_names",
        "project",
        "qr_id",
        "requests",
        "spec",
        "state",
        "state_initiator",
        "valid_after",
        "valid_until",
        "zone",
    )

    def __init__(
        self,
        *,
        project: str,
        zone: str,
        qr_id: str,
        spec: dict[str, Any],
        create_time: float,
        valid_after: float,
        valid_until: float | None,
        requests: list[NodeRequest],
    ) -> None:
        self.project = project
        self.zone = zone
        self.qr_id = qr_id
        self.requests = requests  # validated at creation; provisioned as a whole
        self.spec = spec
        self.create_time = create_time
        self.valid_after = valid_after  # not provisioned before this instant
        self.valid_until = valid_until  # FAILED if not provisioned by then
        self.state = "WAITING_FOR_RESOURCES"
        self.state_initiator: str | None = None
        self.failed_error: dict[str, Any] | None = None
        self.node_names: list[str] = []  # nodes it provisioned that still exist
        self.generation = 0

    def bump(self) -> None:
        """A state change: every timer scheduled before it is stale."""
        self.generation = next(_GENERATIONS)

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"

    @property
    def name(self) -> str:
        return f"{self.parent}/queuedResources/{self.qr_id}"

    @property
    def is_spot(self) -> bool:
        return "spot" in self.spec

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "createTime": rfc3339(self.create_time)}
        for key in ("tpu", "spot", "guaranteed", "queueingPolicy"):
            if key in self.spec:
                out[key] = self.spec[key]
        state: dict[str, Any] = {"state": self.state}
        data_key = _state_data_key(self.state)
        if data_key is not None:
            state[data_key] = {"error": self.failed_error} if self.state == "FAILED" else {}
        if self.state_initiator:
            state["stateInitiator"] = self.state_initiator
        out["state"] = state
        if self.spec.get("reservationName"):
            out["reservationName"] = self.spec["reservationName"]
        return out


def _state_data_key(state: str) -> str | None:
    """QueuedResourceState's oneof member for a state (`activeData`, `failedData`, ...).
    WAITING_FOR_RESOURCES has none in v2."""
    if state in ("WAITING_FOR_RESOURCES", "STATE_UNSPECIFIED"):
        return None
    head, *rest = state.lower().split("_")
    return head + "".join(p.title() for p in rest) + "Data"
