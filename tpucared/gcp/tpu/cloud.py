"""`TpuCloud`: the Cloud port (tpucared/ports/cloud.py) over the TPU API's `TpuClient`.

What the runtime holds for every `api = "tpu"` fleet. Each port call is one or two client
calls, nothing decided here:
- `observe` is `observe_zone` (observe.py) with this location's `NodeCache` and `PageMemo`,
  kept here per (project, zone), so unchanged pages are not parsed and unchanged nodes not
  converted again (a location no longer listed keeps its small memo: the results are the
  same either way, the memo only saves work);
- `create` is nodes.create, or queuedResources.create for a queued slot (one node, or a
  multislice of `slices` nodes `{queued}-0` ..); `delete` is nodes.delete, or a forced
  queuedResources.delete (its nodes first: a queued resource cannot go while it has one);
- `poll` is operations.get, the `Operation` read into the port's `OperationState`;
- `host_keys` reads the workers' `hostkeys/` guest attributes (worker order = list order, as
  the API returns them for all workers), what gcloud does;
- `oslogin` is the OS Login v1 client on the same request path (oslogin.py).
Errors are the client's `ApiError`s, which are the port's `CloudError`s.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tpucared.core.model.abilities import CloudAbilities
from tpucared.core.model.observed import ZoneObservation
from tpucared.gcp.auth import TokenSource
from tpucared.gcp.responses import PageMemo
from tpucared.gcp.tpu import names
from tpucared.gcp.tpu.client import RequestHook, TpuClient
from tpucared.gcp.tpu.observe import NodeCache, observe_zone
from tpucared.gcp.tpu.operation import Operation
from tpucared.gcp.tpu.oslogin import OsLoginClient, endpoint_for
from tpucared.ports.cloud import NodeShape, OperationState, PublishedHostKeys

API = "tpu"  # `FleetSpec.api` of the fleets this cloud keeps

# What the TPU API can do, as tpucared uses it (core/model/abilities.py). Its nodes say
# PREEMPTED themselves (Node.State), so it keeps no separate loss records; early maintenance
# is v2alpha1 `nodes.performMaintenance`; host keys are the `hostkeys/` guest attributes.
ABILITIES = CloudAbilities(
    queued=True,
    multislice=True,
    reservations=True,
    early_maintenance=True,
    host_keys=True,
    os_login=True,
)


class TpuCloud:
    def __init__(self, client: TpuClient) -> None:
        self.client = client
        self._oslogin = OsLoginClient(client, endpoint_for(client.endpoint))
        self._caches: dict[tuple[str, str], NodeCache] = {}  # its nodes at the last list
        self._pages: dict[tuple[str, str], PageMemo] = {}  # its node list's pages as last read

    @classmethod
    def connect(
        cls, endpoint: str, *, token_source: TokenSource, on_request: RequestHook | None = None
    ) -> TpuCloud:
        """A cloud over a new client of `endpoint` (closed by `aclose`)."""
        return cls(TpuClient(endpoint, token_source=token_source, on_request=on_request))

    @property
    def abilities(self) -> CloudAbilities:
        return ABILITIES

    @property
    def oslogin(self) -> OsLoginClient:
        return self._oslogin

    async def aclose(self) -> None:
        await self.client.aclose()

    async def observe(
        self, project: str, zone: str, now: datetime, *, queued_resources: bool
    ) -> ZoneObservation:
        where = (project, zone)
        return await observe_zone(
            self.client,
            project,
            zone,
            now,
            queued_resources=queued_resources,
            cache=self._caches.setdefault(where, {}),
            pages=self._pages.setdefault(where, PageMemo()),
        )

    async def create(
        self,
        project: str,
        zone: str,
        name: str,
        shape: NodeShape,
        *,
        queued: str | None = None,
        slices: int = 1,
        reservation: str | None = None,
    ) -> OperationState:
        if queued is not None and slices > 1:
            op = await self.client.create_queued_resource(
                project,
                zone,
                queued,
                multislice_count=slices,
                node_id_prefix=queued,
                shape=shape,
                reservation_name=reservation,
            )
        elif queued is not None:
            op = await self.client.create_queued_resource(
                project, zone, queued, node_id=name, shape=shape, reservation_name=reservation
            )
        else:
            op = await self.client.create_node(project, zone, name, shape)
        return operation_state(op)

    async def delete(
        self, project: str, zone: str, name: str, *, queued: str | None = None
    ) -> OperationState:
        if queued is not None:
            op = await self.client.delete_queued_resource(project, zone, queued, force=True)
        else:
            op = await self.client.delete_node(project, zone, name)
        return operation_state(op)

    async def poll(self, operation: str) -> OperationState:
        return operation_state(await self.client.get_operation(operation))

    async def start_maintenance(self, project: str, zone: str, name: str) -> OperationState:
        return operation_state(await self.client.perform_maintenance(project, zone, name))

    async def host_keys(self, project: str, zone: str, name: str) -> PublishedHostKeys:
        node = names.node_name(project, zone, name)
        body = await self.client.get_guest_attributes(node, query_path="hostkeys/")
        return guest_attribute_pairs(body)


def operation_state(op: Operation) -> OperationState:
    """The port's view of a TPU API operation."""
    return OperationState(
        name=op.name,
        done=op.done,
        error=op.exception(),
        verb=op.verb,
        duration_s=op.duration_s,
    )


def guest_attribute_pairs(body: Mapping[str, Any]) -> dict[int, list[tuple[str, str]]]:
    """{worker: [(key, value), ...]} from a getGuestAttributes response; workers that
    publish nothing are left out."""
    out: dict[int, list[tuple[str, str]]] = {}
    for index, worker in enumerate(body.get("guestAttributes") or ()):
        items = (worker.get("queryValue") or {}).get("items") or ()
        pairs = [(str(i.get("key", "")), str(i.get("value", ""))) for i in items]
        found = [(k, v) for k, v in pairs if k and v]
        if found:
            out[index] = found
    return out
