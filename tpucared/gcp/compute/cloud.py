"""`ComputeCloud`: the Cloud port (tpucared/ports/cloud.py) over Compute Engine's `ComputeClient`.

What the runtime holds for every `api = "compute"` fleet: single-host TPU VMs, one Compute
Engine instance per slot. Each port call is one or two client calls, nothing decided here:
- `observe` is `observe_zone` (observe.py), one instances.list filtered to our owner, with
  this location's `NodeCache` and `PageMemo`; it never raises;
- `create` is instances.insert (bodies.py builds the body from the `NodeShape`; a shape
  Compute Engine cannot make, a queued slot or a multislice is INVALID before any request);
  `delete` is instances.delete (NOT_FOUND: gone already, the caller's to read so);
- `poll` is zoneOperations.get of the operation's path (the name `create` / `delete` hand
  out is `projects/P/zones/Z/operations/O`, names.py), read into the port's
  `OperationState`: a failed one carries its classified error (CAPACITY for a stockout);
- `host_keys` reads the instance's `hostkeys/` guest attributes: one worker, index 0;
  nothing yet (NOT_FOUND, until the guest agent publishes them) is no keys;
- `oslogin` is the OS Login v1 client on the same request path (tpu/oslogin.py).
Beyond the port, `preemption` reads the zone's `compute.instances.preempted` operations for
one instance: the evidence that a lost spot VM was preempted, to ask only when one was lost;
`preemptions` (the optional `PreemptionRecords` of ports/cloud.py) reads them once for every
instance the daemon lost in a zone in one tick, as the core's `PreemptionRecord`s.
Errors are the client's `ApiError`s, which are the port's `CloudError`s.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from tpucared.core.model.observed import PreemptionRecord, ZoneObservation
from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.auth import TokenSource
from tpucared.gcp.compute import bodies, names
from tpucared.gcp.compute.client import ComputeClient
from tpucared.gcp.compute.observe import INSTANCE_LIST_FIELDS, observe_zone
from tpucared.gcp.compute.operation import PREEMPTED, Operation
from tpucared.gcp.errors import ApiError, NotFoundError
from tpucared.gcp.fields import parse_time
from tpucared.gcp.observing import NodeCache
from tpucared.gcp.responses import PageMemo
from tpucared.gcp.rest import RequestHook
from tpucared.gcp.tpu.oslogin import OsLoginClient, endpoint_for
from tpucared.ports.cloud import NodeShape, OperationState, PublishedHostKeys

API = "compute"  # `FleetSpec.api` of the fleets this cloud keeps


class ComputeCloud:
    def __init__(
        self,
        client: ComputeClient,
        *,
        owner: str | None,
        oslogin_endpoint: str | None = None,
        boot_disk_gb: int = bodies.BOOT_DISK_GB,
        list_fields: str | None = INSTANCE_LIST_FIELDS,
    ) -> None:
        """`owner`: the `tpucared-owner` label value whose instances `observe` lists (None:
        every instance). `oslogin_endpoint`: OS Login's (default: Google's for Google's
        Compute Engine, else the client's own server, an emulator)."""
        self.client = client
        self.owner = owner
        if oslogin_endpoint is None:
            google = client.endpoint == names.DEFAULT_ENDPOINT
            oslogin_endpoint = endpoint_for(names.TPU_ENDPOINT if google else client.endpoint)
        self._oslogin = OsLoginClient(client, oslogin_endpoint)
        self._boot_disk_gb = boot_disk_gb
        self._fields = list_fields
        self._caches: dict[tuple[str, str], NodeCache] = {}  # its instances at the last list
        self._pages: dict[tuple[str, str], PageMemo] = {}  # its list's pages as last read

    @classmethod
    def connect(
        cls,
        tpu_endpoint: str,
        *,
        token_source: TokenSource,
        owner: str | None,
        on_request: RequestHook | None = None,
    ) -> ComputeCloud:
        """A cloud over a new client (closed by `aclose`) of Compute Engine: Google's when
        `tpu_endpoint` (config's `gcp.endpoint`) is Google's TPU API, else that server (an
        emulator serves both), and OS Login likewise."""
        client = ComputeClient(
            names.endpoint_for(tpu_endpoint), token_source=token_source, on_request=on_request
        )
        return cls(client, owner=owner, oslogin_endpoint=endpoint_for(tpu_endpoint))

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
            owner=self.owner,
            queued_resources=queued_resources,
            fields=self._fields,
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
        if queued is not None or slices > 1:
            raise ApiError.of(
                ErrorKind.INVALID,
                "Compute Engine fleets make one instance per slot: no queued resources, "
                "no multislice (yet)",
            )
        try:
            body = bodies.instance_body(
                shape, zone, name, reservation=reservation, boot_disk_gb=self._boot_disk_gb
            )
        except ValueError as exc:
            raise ApiError.of(ErrorKind.INVALID, str(exc)) from exc
        return operation_state(await self.client.insert_instance(project, zone, body))

    async def delete(
        self, project: str, zone: str, name: str, *, queued: str | None = None
    ) -> OperationState:
        if queued is not None:
            raise ApiError.of(ErrorKind.INVALID, "Compute Engine has no queued resources")
        return operation_state(await self.client.delete_instance(project, zone, name))

    async def poll(self, operation: str) -> OperationState:
        try:
            project, zone, name = names.operation_place(operation)
        except ValueError as exc:
            # Not an operation this cloud handed out: nothing it could ever answer.
            raise NotFoundError(str(exc)) from exc
        return operation_state(await self.client.get_operation(project, zone, name))

    async def host_keys(self, project: str, zone: str, name: str) -> PublishedHostKeys:
        try:
            body = await self.client.get_guest_attributes(project, zone, name, "hostkeys/")
        except NotFoundError:
            return {}  # not published yet (or the instance is gone: the list will say)
        value = body.get("queryValue")
        items = value.get("items") if isinstance(value, dict) else None
        pairs = [
            (str(i.get("key") or ""), str(i.get("value") or ""))
            for i in items or ()
            if isinstance(i, dict)
        ]
        found = [(k, v) for k, v in pairs if k and v]
        return {0: found} if found else {}

    async def preemption(self, project: str, zone: str, name: str) -> Operation | None:
        """The latest `compute.instances.preempted` operation of instance `name`, or None.
        One zoneOperations.list: ask only when an instance was lost, never every tick."""
        ops = await self.client.list_operations(
            project, zone, filter=f'operationType="{PREEMPTED}"'
        )
        mine = [
            op
            for op in ops
            if op.operation_type == PREEMPTED
            and op.target_link
            and names.names_instance(op.target_link, project, zone, name)
        ]
        return max(mine, key=lambda op: op.insert_time or "", default=None)

    async def preemptions(
        self, project: str, zone: str, nodes: Collection[str]
    ) -> tuple[PreemptionRecord, ...]:
        """The zone's `compute.instances.preempted` operations naming one of `nodes`: one
        zoneOperations.list (filtered by type; matched to the instances here, by path, since
        the host in `targetLink` is the API's own), however many were lost."""
        wanted = set(nodes)
        ops = await self.client.list_operations(
            project, zone, filter=f'operationType="{PREEMPTED}"'
        )
        out = []
        for op in ops:
            name = op.target
            if op.operation_type != PREEMPTED or name not in wanted or op.target_link is None:
                continue
            if not names.names_instance(op.target_link, project, zone, name):
                continue
            at = parse_time(op.insert_time or op.start_time or op.end_time)
            out.append(PreemptionRecord(name=name, at=at, cloud_id=op.target_id, record=op.name))
        return tuple(out)


def operation_state(op: Operation) -> OperationState:
    """The port's view of a Compute Engine operation; its name is its path."""
    return OperationState(
        name=op.path, done=op.done, error=op.exception(), verb=op.verb, duration_s=op.duration_s
    )
