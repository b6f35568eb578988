"""The Cloud port: everything the runtime needs from a cloud that keeps nodes.

In the spirit of Ray autoscaler v2's `ICloudInstanceProvider` (list what exists, launch,
terminate, errors as data), and no more than the runtime calls today:

- `observe`    one (project, zone)'s nodes (and queued resources where the cloud has them) as
               core observations. Never raises: a failed list is a `ZoneObservation` with
               `error` set, because "the list failed" and "the zone is empty" must never look
               the same to the planner. Each node's state comes with its core `StateClass`
               and stuck rule, from the adapter's one table of its own states.
- `create`     start making a node, or a queued slot of one node or of `slices` nodes
               (multislice), from a `NodeShape`; `delete` start removing one. Both answer
               the cloud's long-running operation as an `OperationState`.
- `poll`       an operation's state now (`done`, the classified error it ended with).
- `host_keys`  what a node's workers publish of their SSH host keys, worker by worker.
- `oslogin`    the OS Login calls where the cloud has them (None where it has not).
- `abilities`  what the cloud can do (`CloudAbilities`, core/model/abilities.py): the runtime
               stamps it on each observation, and the core decides on it, never on API names.

Optional, beside the port: `OperationWaits`, for a cloud whose abilities say `operation_wait`:
`wait` answers an operation's state when it ends (or when the cloud stops holding the request),
and `waits_on` says which of its operations it can wait on (runtime/nodes/op_waits.py).
`PreemptionRecords.preemptions`, the cloud's records that it
preempted nodes, for a cloud whose node states do not say so (Compute Engine; the TPU API's
nodes say PREEMPTED and it has no such method). The runtime reads them only in a tick whose
plan lost such a node (core/nodes/preemption.py).

Every call may be given a deadline: `ANSWER_BY` (a context variable, the event loop's clock) is
the instant by which the caller needs the answer, and the caller cancels the call there. An
implementation that retries must not start a retry that cannot finish before it (gcp/retry.py):
the request would only be cancelled, costing the API a request for nothing. `observe` may be
given `LIST_BOUNDS` the same way: how many pages each paginated list may take and whether its
requests are retried (a failing zone's probe, core/planning/zone_health.py), and the adapter
writes back into it the most pages a list took.

Every call but `observe` fails only with a `CloudError` carrying the core `ErrorKind` the
planner decides on (the gcp adapters' `ApiError` is one). The runtime holds one port per
cloud API (`FleetSpec.api`) and never names an implementation; the TPU API's ("tpu") is
`tpucared/gcp/tpu/cloud.py` `TpuCloud`, Compute Engine's ("compute": single-host TPU VMs,
one instance per node) `tpucared/gcp/compute/cloud.py` `ComputeCloud`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol, runtime_checkable

from tpucared.core.model.abilities import CloudAbilities
from tpucared.core.model.observed import PreemptionRecord, ZoneObservation
from tpucared.core.model.specs import CapacityKind, DataDisk, ErrorKind

DEFAULT_SA_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)

# When the caller of a cloud call needs its answer, on the running loop's clock (`loop.time()`);
# None: no deadline. Set by the runtime around a call (module docstring), read by the adapters.
ANSWER_BY: ContextVar[float | None] = ContextVar("tpucared_answer_by", default=None)


@dataclass
class ListBounds:
    """How one `observe` lists (set by the runtime) and what its lists took (by the adapter)."""

    pages: int | None = None  # the most pages any one list may take; None: the adapter's own
    retry: bool = True  # False: a failed request is not retried
    longest: int = 0  # the most pages one list of this observe took (written by the adapter)


# The bounds of the `observe` running in this context; None: the adapter's own, retried.
LIST_BOUNDS: ContextVar[ListBounds | None] = ContextVar("tpucared_list_bounds", default=None)


class CloudError(Exception):
    """A classified failure of one cloud call (or of the operation it started). `kind` is
    what the planner decides on; `message` is for people; `attempts` counts the requests
    made before giving up (retries included)."""

    kind: ErrorKind
    attempts: int = 1

    def __init__(self, message: str, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind


# The key of `NodeShape.extra` (and `FleetSpec.extra`) holding what a node boots: the TPU
# API's runtime version, Compute Engine's image. The TPU fleets' config key, and the name
# stored spec hashes have always digested it under (core/model/specs.py `spec_hash`).
SOFTWARE_KEY = "runtime_version"


@dataclass(frozen=True)
class NodeShape:
    """What a node is made of: type, software, capacity tier, labels, metadata, network.

    The runtime builds one per create (runtime/nodes/calls.py, from the action and the
    daemon's template) and it travels unchanged to the adapter, which turns it into its
    request body. `capacity` None makes the node of a queued slot, where the tier belongs to
    the queued slot itself, not to the node."""

    # The cloud's name for the machine (TPU: the accelerator type; Compute Engine: the
    # machine type, e.g. tpu7x-standard-4t).
    accelerator_type: str
    # Cloud-specific shape, from the fleet's config to the adapter, unread by the core
    # (`FleetSpec.extra`): e.g. what it boots under `SOFTWARE_KEY` (`software`).
    extra: Mapping[str, str] = field(default_factory=dict)
    capacity: CapacityKind | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    metadata: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    enable_external_ips: bool = True
    network: str | None = None
    subnetwork: str | None = None
    service_account: str | None = None
    service_account_scopes: tuple[str, ...] = DEFAULT_SA_SCOPES
    description: str | None = None
    data_disks: tuple[DataDisk, ...] = ()
    # What a preempted spot VM becomes, where the cloud lets one choose (Compute Engine's
    # instanceTerminationAction): "stop" (it stays listed, TERMINATED, until deleted) or
    # "delete" (it vanishes). None: the adapter's default. The TPU API has no such choice.
    on_preemption: str | None = None
    # A multi-host slice (Compute Engine, issue 28): the fleet's `topology` (e.g. "2x2x4")
    # and the VMs it takes (core/model/machines.py `hosts_of`); one host is the single-VM
    # path. The TPU API's accelerator type says both by itself: None and 1 there.
    topology: str | None = None
    hosts: int = 1
    # Flex-start only (`capacity` FLEX_START): the longest the VMs may run, in seconds.
    max_run_duration_s: int | None = None
    # Reserved only: the reservation is a calendar-mode one, whose VMs Compute Engine makes
    # RESERVATION_BOUND (provisioning model), not STANDARD.
    reservation_bound: bool = False

    @property
    def software(self) -> str:
        """The software it boots (TPU: the runtime version; Compute Engine: the boot image,
        "" for the default image of the machine type's TPU generation)."""
        return self.extra.get(SOFTWARE_KEY, "")

    def for_queue(self) -> NodeShape:
        """The same node as a queued slot's node: the tier moves to the queued slot."""
        return replace(self, capacity=None)


@dataclass(frozen=True)
class OperationState:
    """A cloud's long-running operation as the runtime follows it. `error`: the classified
    error of a finished, failed one. `verb`: what the cloud says it did ("create",
    "delete"), when it says. `duration_s`: how long it ran by the cloud's own clock."""

    name: str
    done: bool = False
    error: CloudError | None = None
    verb: str | None = None
    duration_s: float | None = None

    @property
    def failed(self) -> bool:
        return self.done and self.error is not None


# A node's workers' published SSH host keys: worker index -> (key type, key) pairs, as the
# cloud hands them out (the runtime validates them and pins them per incarnation).
PublishedHostKeys = Mapping[int, Sequence[tuple[str, str]]]


@dataclass(frozen=True)
class ProfileKey:
    fingerprint: str
    key: str  # "ssh-ed25519 AAAA... comment", as imported
    expires_usec: int | None

    @property
    def blob(self) -> str:
        """The base64 key blob: what says two entries are one key, whatever the comments."""
        fields = self.key.split()
        return fields[1] if len(fields) > 1 else ""

    @property
    def comment(self) -> str:
        return " ".join(self.key.split()[2:])


@dataclass(frozen=True)
class LoginProfile:
    username: str  # the primary POSIX account's
    keys: tuple[ProfileKey, ...]


@runtime_checkable
class TokenSource(Protocol):
    """The credentials the clouds' ports of one process are connected with, made from
    `[gcp] credentials` by the wiring (runtime/startup.py; the implementations are
    gcp/auth.py's). The runtime hands them to the ports, asks whose they are (`account`, for
    OS Login) and closes them; only the adapters ask for the Authorization header."""

    async def authorization(self) -> str | None:
        """The Authorization header value for the next request; None sends no header.
        Raises a CloudError (PERMISSION or TRANSIENT) when a token cannot be obtained."""
        ...

    async def invalidate(self, rejected: str | None = None) -> None:
        """The server answered 401 to `rejected`: the next `authorization()` must refresh.
        Passing the rejected value lets concurrent 401s share one refresh: a value that is
        no longer current was already replaced and needs nothing more."""
        ...

    async def account(self) -> str | None:
        """The service account these credentials act as, or None (none: a person's, or no
        credentials at all)."""
        ...

    async def aclose(self) -> None: ...


class OsLogin(Protocol):
    """The OS Login calls the daemon makes (runtime/oslogin.py); each raises CloudError."""

    async def import_key(
        self, account: str, public_key: str, *, expires: datetime | None
    ) -> LoginProfile: ...

    async def login_profile(self, account: str) -> LoginProfile: ...

    async def delete_key(self, account: str, fingerprint: str) -> None: ...


class Cloud(Protocol):
    """One cloud API, as the runtime uses it (see the module docstring). `project` is always
    a real project here: the runtime resolves the core's DEFAULT_PROJECT before calling."""

    @property
    def abilities(self) -> CloudAbilities:
        """What this cloud can do (core/model/abilities.py), stamped on its observations."""
        ...

    @property
    def oslogin(self) -> OsLogin | None: ...

    async def observe(
        self, project: str, zone: str, now: datetime, *, queued_resources: bool
    ) -> ZoneObservation: ...

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
        """Start making node `name`, or (`queued`) the queued slot of that name holding it,
        or (`slices` > 1) the queued slot holding nodes `{queued}-0` .. `{queued}-{slices-1}`."""
        ...

    async def delete(
        self, project: str, zone: str, name: str, *, queued: str | None = None
    ) -> OperationState:
        """Start removing node `name`, or (`queued`) that queued slot with its nodes.
        NOT_FOUND means it is gone already."""
        ...

    async def poll(self, operation: str) -> OperationState: ...

    async def host_keys(self, project: str, zone: str, name: str) -> PublishedHostKeys: ...

    async def start_maintenance(self, project: str, zone: str, name: str) -> OperationState:
        """Start node `name`'s pending host-maintenance window now (a fleet's
        `on_maintenance = now`). INVALID when the cloud refuses (nothing pending, the window
        cannot be moved, a slice too small to start it early)."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class OperationWaits(Protocol):
    """A cloud that can wait on its operations (`CloudAbilities.operation_wait`): one
    request the cloud holds until the operation ends, instead of polls (module docstring)."""

    def waits_on(self, operation: str) -> bool:
        """Whether `wait` fits this operation (not every operation of such a cloud ends
        with the state the runtime waits for: a Compute Engine slice's create does not)."""
        ...

    async def wait(self, operation: str) -> OperationState:
        """The operation's state once it ended, or once the cloud stopped holding the request
        (not done then: ask again). Raises CloudError, NOT_FOUND for an unknown operation."""
        ...


@runtime_checkable
class PreemptionRecords(Protocol):
    """A cloud that keeps records of the nodes it preempted, or stopped for host
    maintenance (module docstring); each record says which (`PreemptionRecord.kind`)."""

    async def preemptions(
        self, project: str, zone: str, nodes: Collection[str]
    ) -> tuple[PreemptionRecord, ...]:
        """Every record in (`project`, `zone`) naming one of the nodes `nodes` (any
        incarnation of the name: the record's `cloud_id` says which, where it can). Raises
        CloudError."""
        ...


@runtime_checkable
class SharedResources(Protocol):
    """A cloud whose nodes need resources of their own beside them, made by `create` and
    shared between nodes (Compute Engine's multi-host slices: an instance template per fleet
    spec, a workload policy per region and topology). `sweep` deletes those of ours that no
    node uses any more; the runtime calls it once a delete of such a node is confirmed, at
    start (a crash may have left some) and at the end of `tpucared down`."""

    async def sweep(self, project: str, zone: str) -> tuple[str, ...]:
        """Delete (start deleting) our shared resources that (project, zone)'s nodes no longer
        use; the names of those it deleted. Raises CloudError."""
        ...


Clouds = Mapping[str, Cloud]  # by cloud API name (`FleetSpec.api`)
