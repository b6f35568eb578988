"""`ComputeCloud`: the Cloud port (tpucared/ports/cloud.py) over Compute Engine's `ComputeClient`.

What the runtime holds for every `api = "compute"` fleet: single-host TPU VMs, one Compute
Engine instance per slot, and multi-host slices, one MIG per slot (below). Each port call
of a single VM is one or two client calls, nothing decided here:
- `observe` is `observe_zone` (observe.py), one instances.list filtered to our owner and one
  instanceGroupManagers.list, with this location's `NodeCache` and `PageMemo`; it never
  raises;
- `create` is instances.insert (bodies.py builds the body from the `NodeShape`; a shape
  Compute Engine cannot make, a queued slot or a multislice is INVALID before any request);
  `delete` is instances.delete (NOT_FOUND: gone already, the caller's to read so);
- `poll` is zoneOperations.get of the operation's path (the name `create` / `delete` hand
  out is `projects/P/zones/Z/operations/O`, names.py), read into the port's
  `OperationState`: a failed one carries its classified error (CAPACITY for a stockout);
- `wait` (the optional `OperationWaits`; `ABILITIES.operation_wait`) is zoneOperations.wait
  of such a path, which Google answers when the operation is DONE or after about 2 minutes
  (research §2.6): one request where polls took several. `waits_on` is False for a
  slice's operation: its create ends when the MIG's members are made, which no wait says;
- `host_keys` reads the instance's `hostkeys/` guest attributes: one worker, index 0;
  nothing yet (NOT_FOUND, until the guest agent publishes them) is no keys;
- `oslogin` is the OS Login v1 client on the same request path (tpu/oslogin.py).
Beyond the port, `preemption` reads the zone's `compute.instances.preempted` operations for
one instance: the evidence that a lost spot VM was preempted, to ask only when one was lost;
`preemptions` (the optional `PreemptionRecords` of ports/cloud.py) reads them, and the
host-maintenance operations (operation.py `HOST_MAINTENANCE`), once for every instance the
daemon lost in a zone in one tick, as the core's `PreemptionRecord`s, each with its kind.
Multi-host slices (`shape.hosts` > 1, issue 28) and single-host flex-start slots (a one-VM
bulk MIG without a workload policy, issue 39): one zonal MIG per node (slices.py, shared.py):
- `create` ensures the workload policy and the instance template (shared.py, waiting for
  their operations within the caller's deadline), then inserts the MIG; the name it hands out
  is `projects/P/zones/Z/instanceGroupManagers/M/operations/O` (names.py), which `poll`
  routes to the slice's check: zoneOperations.get of O until it is DONE (its error, if any),
  then instanceGroupManagers.get + listManagedInstances (slices.py `provisioning`): done when
  every member is past its making (RUNNING, or lost already), CAPACITY / QUOTA when a
  member's or the bulk check's errors say so.
  So a slice's poll costs 1 request while the insert runs, then 2 until it is provisioned
  (3 at the poll that finds the insert done; after a restart, 3 at the first). A flex-start
  slice that waits for capacity is read again only when the zone's MIG list shows it moved,
  or a minute after its last read (waiting.py): none between, where a poll answers running.
- `delete` is instanceGroupManagers.delete for a name that was a MIG at the zone's last
  observation; for a name it has not seen, instances.delete, then on NOT_FOUND
  instanceGroupManagers.delete (a name is never both: the zone would be unreadable).
- `host_keys` of a slice: each member's `hostkeys/` guest attributes, keyed by worker id
  (one instances.list of the slice's members by name, then one get per member).
- `preemptions` maps a member's `compute.instances.preempted` record to its slice's name.
- `sweep` (the optional `SharedResources`): shared.py's.
`start_maintenance` is instances.performMaintenance of the VM, or of each member of a slice.
Errors are the client's `ApiError`s, which are the port's `CloudError`s.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from tpucared.core.model.abilities import CloudAbilities
from tpucared.core.model.observed import PreemptionRecord, ZoneObservation
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind, ErrorKind
from tpucared.gcp.auth import TokenSource
from tpucared.gcp.compute import bodies, names, shared
from tpucared.gcp.compute import slices as slice_rules
from tpucared.gcp.compute.client import ComputeClient
from tpucared.gcp.compute.observe import INSTANCE_LIST_FIELDS, observe_zone
from tpucared.gcp.compute.operation import PREEMPTED, RECORD_KINDS, RECORDS_FILTER, Operation
from tpucared.gcp.compute.waiting import REREAD_S, WaitingSlices
from tpucared.gcp.errors import ApiError, NotFoundError
from tpucared.gcp.fields import parse_time
from tpucared.gcp.observing import NodeCache
from tpucared.gcp.responses import PageMemo
from tpucared.gcp.rest import RequestHook
from tpucared.gcp.tpu.oslogin import OsLoginClient, endpoint_for
from tpucared.ports.cloud import NodeShape, OperationState, PublishedHostKeys

API = "compute"  # `FleetSpec.api` of the fleets this cloud keeps

# What Compute Engine can do, as tpucared uses it (core/model/abilities.py). A preempted spot
# VM turns TERMINATED or vanishes without saying why: the zone operations of type
# `compute.instances.preempted` (and of host maintenance) say it (operation.py,
# docs/research/compute-engine.md §4.3). No queued resources or multislice here; flex-start
# and calendar reservations are MIG resize requests (slices.py).
ABILITIES = CloudAbilities(
    reservations=True,
    preemption_records="compute.instances.preempted operation",
    maintenance_records="host-maintenance operation",
    early_maintenance=True,
    host_keys=True,
    os_login=True,
    flex_start=True,
    operation_wait=True,
)


class ComputeCloud:
    def __init__(
        self,
        client: ComputeClient,
        *,
        owner: str | None,
        oslogin_endpoint: str | None = None,
        boot_disk_gb: int = bodies.BOOT_DISK_GB,
        list_fields: str | None = INSTANCE_LIST_FIELDS,
        waiting_reread_s: float = REREAD_S,
    ) -> None:
        """`owner`: the `tpucared-owner` label value whose instances `observe` lists (None:
        every instance). `oslogin_endpoint`: OS Login's (default: Google's for Google's
        Compute Engine, else the client's own server, an emulator). `waiting_reread_s`: the
        longest a waiting flex-start slice goes unread (waiting.py)."""
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
        self._slices: dict[tuple[str, str], set[str]] = {}  # its MIGs at the last observation
        self._ran: dict[tuple[str, str], dict[str, dict[str, str | None]]] = {}  # slices.py
        self._inserted: set[str] = set()  # slice operations whose MIG insert is done
        self._waiting = WaitingSlices(waiting_reread_s)  # when a waiting slice is worth a read

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
        progress: dict[str, str] = {}
        observation = await observe_zone(
            self.client,
            project,
            zone,
            now,
            owner=self.owner,
            queued_resources=queued_resources,
            fields=self._fields,
            cache=self._caches.setdefault(where, {}),
            pages=self._pages.setdefault(where, PageMemo()),
            slices=self._slices.setdefault(where, set()),
            ran=self._ran.setdefault(where, {}),
            progress=progress,
        )
        if observation.error is None:
            self._waiting.listed(where, progress)
        return observation

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
        if shape.hosts > 1 or shape.capacity is CapacityKind.FLEX_START:
            # A single-host flex-start slot is a one-VM bulk MIG (slices.py): Google
            # documents TPU flex-start on Compute Engine through MIGs.
            return await self._create_slice(project, zone, name, shape, reservation)
        try:
            body = bodies.instance_body(
                shape, zone, name, reservation=reservation, boot_disk_gb=self._boot_disk_gb
            )
        except ValueError as exc:
            raise ApiError.of(ErrorKind.INVALID, str(exc)) from exc
        return operation_state(await self.client.insert_instance(project, zone, body))

    async def _create_slice(
        self, project: str, zone: str, name: str, shape: NodeShape, reservation: str | None
    ) -> OperationState:
        owner = shape.labels.get(OWNER_LABEL) or self.owner
        fleet = shape.labels.get(FLEET_LABEL)
        if (shape.hosts > 1 and not shape.topology) or not owner or not fleet:
            raise ApiError.of(
                ErrorKind.INVALID, "a multi-host slice needs a topology, an owner and a fleet"
            )
        try:
            template = shared.template_body(
                shape, zone, reservation=reservation, boot_disk_gb=self._boot_disk_gb
            )
        except ValueError as exc:
            raise ApiError.of(ErrorKind.INVALID, str(exc)) from exc
        for again in (False, True):
            policy = (
                await shared.ensure_policy(self.client, project, zone, owner, shape.topology)
                if shape.topology and shape.hosts > 1
                else None  # one VM: no ICI topology to place
            )
            template_path = await shared.ensure_template(self.client, project, template)
            body = slice_rules.mig_body(
                name, shape, owner=owner, fleet=fleet, template=template_path, policy=policy
            )
            try:
                op = await self.client.insert_mig(project, zone, body)
                break
            except NotFoundError as error:
                # A sweep (of another slot's delete) removed the template or the policy
                # between their ensure and this insert: make them again, once.
                if again:
                    raise ApiError.of(ErrorKind.TRANSIENT, str(error)) from error
        self._slices.setdefault((project, zone), set()).add(name)
        path = names.slice_operation_path(project, zone, name, op.name)
        return OperationState(name=path, done=op.failed, error=op.exception(), verb="create")

    async def delete(
        self, project: str, zone: str, name: str, *, queued: str | None = None
    ) -> OperationState:
        if queued is not None:
            raise ApiError.of(ErrorKind.INVALID, "Compute Engine has no queued resources")
        if name in self._slices.get((project, zone), ()):
            return operation_state(await self.client.delete_mig(project, zone, name))
        try:
            return operation_state(await self.client.delete_instance(project, zone, name))
        except NotFoundError:
            if (project, zone) in self._slices:
                raise  # observed, and not a MIG there: an instance already gone
        # Not observed yet (a restart): maybe a slice. NOT_FOUND here too: gone either way.
        return operation_state(await self.client.delete_mig(project, zone, name))

    async def poll(self, operation: str) -> OperationState:
        if "/instanceGroupManagers/" in operation:
            return await self._poll_slice(operation)
        try:
            project, zone, name = names.operation_place(operation)
        except ValueError as exc:
            # Not an operation this cloud handed out: nothing it could ever answer.
            raise NotFoundError(str(exc)) from exc
        return operation_state(await self.client.get_operation(project, zone, name))

    def waits_on(self, operation: str) -> bool:
        """A single VM's create or delete, or a slice's delete (all zone operations); not a
        slice's create (`_poll_slice`: done when its members are, after the MIG's insert)."""
        return "/instanceGroupManagers/" not in operation

    async def wait(self, operation: str) -> OperationState:
        if not self.waits_on(operation):
            raise ApiError.of(ErrorKind.INVALID, f"{operation}: a slice's create is polled")
        try:
            project, zone, name = names.operation_place(operation)
        except ValueError as exc:
            raise NotFoundError(str(exc)) from exc
        return operation_state(await self.client.wait_operation(project, zone, name))

    async def _poll_slice(self, operation: str) -> OperationState:
        try:
            project, zone, mig, op_name = names.slice_operation_place(operation)
        except ValueError as exc:
            raise NotFoundError(str(exc)) from exc
        if operation not in self._inserted:  # the MIG's insert first, once
            op = await self.client.get_operation(project, zone, op_name)
            if not op.done or op.failed:
                state = operation_state(op)
                return OperationState(
                    operation, state.done, state.error, "create", state.duration_s
                )
            self._inserted.add(operation)
        if self._waiting.unchanged(operation):
            return OperationState(operation, done=False, error=None, verb="create")
        self._waiting.forget(operation)  # read below; remembered again if it still waits
        group = await self.client.get_mig(project, zone, mig)
        members = await self.client.list_managed_instances(project, zone, mig)
        done, error = slice_rules.provisioning(group, members)  # flex-start: by its description
        if done:
            self._inserted.discard(operation)
        elif slice_rules.is_flex_start(group):
            self._waiting.read(operation, (project, zone), mig, group)
        return OperationState(operation, done=done, error=error, verb="create")

    async def start_maintenance(self, project: str, zone: str, name: str) -> OperationState:
        """instances.performMaintenance of the VM, or of every member of a slice (each host
        has its own window; a member with none pending is refused and skipped: the slice's
        start stands if any member's did)."""
        if name not in self._slices.get((project, zone), ()):
            return operation_state(await self.client.perform_maintenance(project, zone, name))
        members = await self.client.list_managed_instances(project, zone, name)
        started: OperationState | None = None
        refused: ApiError | None = None
        for member in members:
            instance = str(member.get("instance") or "").rsplit("/", 1)[-1]
            if not instance:
                continue
            try:
                op = await self.client.perform_maintenance(project, zone, instance)
            except ApiError as exc:
                if exc.kind is not ErrorKind.INVALID:
                    raise
                refused = refused or exc
                continue
            started = operation_state(op)
        if started is None:
            raise refused or ApiError.of(ErrorKind.INVALID, f"slice {name} has no members")
        return started

    async def host_keys(self, project: str, zone: str, name: str) -> PublishedHostKeys:
        if name in self._slices.get((project, zone), ()):
            return await self._slice_keys(project, zone, name)
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

    async def _slice_keys(self, project: str, zone: str, name: str) -> PublishedHostKeys:
        """Each member's host keys by worker id: one instances.list of the slice's members
        (by name prefix), then one guest attributes get per member."""
        members = await self.client.list_instances(
            project,
            zone,
            filter=f"name eq {name}{slice_rules.MEMBER_SUFFIX.replace('###', '.*')}",
            fields="nextPageToken,warning,items(name,metadata(items))",
        )
        mine = [m for m in members if slice_rules.member_of(m, zone) == name]
        ordered = slice_rules.worker_order(mine)
        out: dict[int, list[tuple[str, str]]] = {}
        for index, member in enumerate(ordered or ()):
            keys = await self.host_keys(project, zone, str(member["name"]))
            if keys.get(0):
                out[index] = list(keys[0])
        return out

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
        """The zone's `compute.instances.preempted` and host-maintenance operations naming
        one of `nodes`, each with its kind: one zoneOperations.list (filtered by type;
        matched to the instances here, by path, since the host in `targetLink` is the API's
        own), however many were lost."""
        wanted = set(nodes)
        # A slice's members are `{slice}-w-NNN`: their records are the slice's.
        slices = wanted & self._slices.get((project, zone), set())
        ops = await self.client.list_operations(project, zone, filter=RECORDS_FILTER)
        out = []
        for op in ops:
            kind = RECORD_KINDS.get(op.operation_type or "")
            name = op.target
            if name is not None and name not in wanted:
                name = _slice_of(name, slices) or name
            if kind is None or name not in wanted or op.target_link is None:
                continue
            at = parse_time(op.insert_time or op.start_time or op.end_time)
            if name in slices:
                out.append(
                    PreemptionRecord(name=name, at=at, cloud_id=None, record=op.name, kind=kind)
                )
                continue
            if not names.names_instance(op.target_link, project, zone, name):
                continue
            out.append(
                PreemptionRecord(name=name, at=at, cloud_id=op.target_id, record=op.name, kind=kind)
            )
        return tuple(out)

    async def sweep(self, project: str, zone: str) -> tuple[str, ...]:
        """Our templates and workload policies no MIG of the zone (region) uses, deleted."""
        return await shared.sweep(self.client, project, zone, self.owner)


def _slice_of(member: str, slices: Collection[str]) -> str | None:
    """The slice whose member `member` (`{slice}-w-NNN`) is, among `slices`."""
    head, sep, number = member.rpartition("-w-")
    return head if sep and number.isdigit() and head in slices else None


def operation_state(op: Operation) -> OperationState:
    """The port's view of a Compute Engine operation; its name is its path."""
    return OperationState(
        name=op.path, done=op.done, error=op.exception(), verb=op.verb, duration_s=op.duration_s
    )
