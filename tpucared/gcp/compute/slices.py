"""A multi-host slice: one zonal managed instance group (MIG) is ONE node (issue 28).

Pure functions from compute v1 JSON, so every rule is testable without a server:

- `mig_body`: the instanceGroupManagers.insert body (`baseInstanceName` `{name}-w-###`,
  `targetSize` = hosts, the workload policy, `defaultActionOnFailure: DO_NOTHING`: tpucared
  replaces a broken slice whole, never the MIG half of one; BULK mode for flex-start and
  reservation-bound slices, the only templates Google allows it with, INDIVIDUAL otherwise:
  `bulk`). A single-host flex-start slot is a one-VM bulk MIG too, without a workload policy
  (TPU flex-start on Compute Engine is documented through MIGs: "You can create and manage
  an individual TPU VM using a MIG by setting the MIG's target size to one", tpu/docs/
  tpus-and-migs; [3P] SkyPilot makes every TPU flex-start shape a BULK MIG). MIGs have no
  labels: `description` carries our owner and fleet (`tpucared-owner=O tpucared-fleet=F`),
  which `mig_labels` reads back, and `tpucared-capacity=flex-start` on a flex-start slice,
  so that `provisioning` knows it waits even after a restart.
- `member_of`: the MIG (of this zone) an instance belongs to, by its `created-by` metadata.
- `worker_order`: members by TPU worker id: `agent-worker-number`, else `tpu-env`'s
  `WORKER_ID`, else the rank of the `-NNN` name suffix; None when a member has none (then
  the slice is never USABLE, SLICE_NO_WORKER_IDS, and a warning says so).
- `SLICE_STATES` + `slice_state`: the one table of a slice's states, in states.py's style;
  the instance statuses where one member's says it all, slice-level names where none does.
- `slice_from_json`: the MIG and its members -> one `ObservedNode` named as the MIG (labels
  from the description, `cloud_id` the MIG's id, endpoints the members by worker id,
  `maintenance` the members' earliest announced window (gcp/maintenance.py `earliest`);
  `run_ends_at` the earliest member's run end (convert.py `run_end`), when a flex-start run has
  one). A member recreated by the MIG (DO_NOTHING should prevent it; a REPAIR policy or a
  cloud that does it anyway) is told by `currentActions.recreating` while it happens and, once
  done, by its instance id against the one the slice ran with (`ran`, observe.py's memory of
  the zone; lost on a restart, when a recreated member RUNNING again is not told apart).
- `provisioning`: what the slice's create operation says once the MIG exists (ComputeCloud
  .poll): done when every member is RUNNING (or lost already); CAPACITY / QUOTA when a member's
  `lastAttempt.errors` (INDIVIDUAL) or the MIG's `bulkInstanceOperation.lastProgressCheck`
  (BULK; not flex-start, which waits for capacity by design) say so; running otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from tpucared.core.model.observed import ObservedNode, StateClass, WorkerEndpoint
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind, ErrorKind
from tpucared.gcp.compute import names
from tpucared.gcp.compute.convert import instance_from_json, run_end, upcoming_maintenance
from tpucared.gcp.compute.states import INSTANCE_STATES, InstanceStatus, parse_status
from tpucared.gcp.errors import ApiError, classify_compute_operation
from tpucared.gcp.fields import MalformedResource, optional_str, parse_time, raw_excerpt
from tpucared.gcp.maintenance import earliest
from tpucared.ports.cloud import NodeShape

MEMBER_SUFFIX = "-w-###"
_WORKER_ENV = re.compile(r"^WORKER_ID:\s*'?(\d+)'?\s*$", re.MULTILINE)
_SUFFIX = re.compile(r"-(\d+)$")


class SliceState(StrEnum):
    """A slice's own state names, where no member's status says it."""

    RUNNING = "RUNNING"  # every member RUNNING, as many as targetSize
    SLICE_CREATING = "SLICE_CREATING"  # the MIG is making its members
    SLICE_PENDING = "SLICE_PENDING"  # members PENDING, or a BULK MIG waiting for room
    SLICE_INCOMPLETE = "SLICE_INCOMPLETE"  # a member gone, the MIG making none
    SLICE_RECREATED = "SLICE_RECREATED"  # the MIG recreating a member: the slice is broken
    SLICE_DELETING = "SLICE_DELETING"  # the MIG deleting its members
    SLICE_NO_WORKER_IDS = "SLICE_NO_WORKER_IDS"  # all RUNNING, but worker order unknown


K = StateClass
SLICE_STATES: Mapping[str, tuple[StateClass, str | None]] = {
    SliceState.RUNNING: (K.USABLE, None),
    SliceState.SLICE_CREATING: (K.CREATING, "creating"),
    SliceState.SLICE_PENDING: (K.WAITING, "queued"),
    SliceState.SLICE_INCOMPLETE: (K.DEAD, None),
    SliceState.SLICE_RECREATED: (K.DEAD, None),
    SliceState.SLICE_DELETING: (K.DELETING, None),
    SliceState.SLICE_NO_WORKER_IDS: (K.UNREADABLE, None),
}


# The slice states that say what the cloud made cannot be used, rather than that capacity
# was taken away: before READY, a failed create with its own backoff (ObservedNode.defect).
DEFECTS: Mapping[str, Callable[[int, object], str]] = {
    SliceState.SLICE_INCOMPLETE: lambda n, size: f"{n} of {size} VMs, and the MIG makes none",
    SliceState.SLICE_RECREATED: lambda n, size: "the MIG recreated a member",
}


# In a flex-start slice's description: its provisioning waits for capacity by design (a
# restarted daemon must not read the bulk check's stockout as a failed create).
FLEX_MARK = "tpucared-capacity=flex-start"


def mig_description(owner: str, fleet: str, *, flex_start: bool = False) -> str:
    text = f"{OWNER_LABEL}={owner} {FLEET_LABEL}={fleet}"
    return f"{text} {FLEX_MARK}" if flex_start else text


def _description_pairs(mig: Mapping[str, Any]) -> dict[str, str]:
    description = mig.get("description")
    if not isinstance(description, str):
        return {}
    return dict(p.split("=", 1) for p in description.split() if "=" in p)


def mig_labels(mig: Mapping[str, Any]) -> dict[str, str] | None:
    """Our owner and fleet labels from a MIG's description; None for a MIG not made by us."""
    pairs = _description_pairs(mig)
    labels = {k: pairs.get(k, "") for k in (OWNER_LABEL, FLEET_LABEL)}
    if not all(labels.values()) or not set(pairs) <= {*labels, FLEX_MARK.split("=")[0]}:
        return None
    return labels


def is_flex_start(mig: Mapping[str, Any]) -> bool:
    """Whether we made this slice flex-start (its description says so)."""
    key, value = FLEX_MARK.split("=")
    return _description_pairs(mig).get(key) == value


def bulk(shape: NodeShape) -> bool:
    """Whether the slice's MIG is made in bulk mode (all VMs at once, or none): "Bulk mode in
    MIGs is only supported with instance templates that specify either a reservation-bound
    or flex-start provisioning model" (compute/docs/instance-groups/
    bulk-create-instances-in-mig). A spot, on-demand or plain reserved (STANDARD) slice is
    INDIVIDUAL: the MIG makes each VM on its own, a stockout in its `lastAttempt`."""
    reservation_bound = shape.capacity is CapacityKind.RESERVED and shape.reservation_bound
    return shape.capacity is CapacityKind.FLEX_START or reservation_bound


def mig_body(
    name: str, shape: NodeShape, *, owner: str, fleet: str, template: str, policy: str | None
) -> dict[str, Any]:
    """The instanceGroupManagers.insert body of slice `name` (`template`, `policy`: paths;
    no workload policy for a one-VM group, a single-host flex-start slot)."""
    body: dict[str, Any] = {
        "name": name,
        "description": mig_description(
            owner, fleet, flex_start=shape.capacity is CapacityKind.FLEX_START
        ),
        "instanceTemplate": template,
        "baseInstanceName": f"{name}{MEMBER_SUFFIX}",
        "targetSize": shape.hosts,
        "targetSizePolicy": {"mode": "BULK" if bulk(shape) else "INDIVIDUAL"},
        "instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"},
    }
    if policy is not None:
        body["resourcePolicies"] = {"workloadPolicy": policy}
    return body


def _metadata(data: Mapping[str, Any]) -> dict[str, str]:
    block = data.get("metadata")
    items = block.get("items") if isinstance(block, Mapping) else None
    if not isinstance(items, list):
        return {}
    return {
        str(i["key"]): str(i.get("value") or "")
        for i in items
        if isinstance(i, Mapping) and isinstance(i.get("key"), str)
    }


def member_of(data: Mapping[str, Any], zone: str) -> str | None:
    """The name of the MIG of `zone` whose member this instance is, else None (an
    instances.list answers for one project: the zone says it all)."""
    created_by = _metadata(data).get("created-by")
    return names.names_mig(created_by, zone) if created_by else None


def worker_id(data: Mapping[str, Any]) -> int | None:
    """A member's TPU worker id from its metadata, else None."""
    meta = _metadata(data)
    number = meta.get("agent-worker-number", "").strip()
    if number.isdigit():
        return int(number)
    found = _WORKER_ENV.search(meta.get("tpu-env", ""))
    return int(found[1]) if found else None


def worker_order(members: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]] | None:
    """Members by worker id (see the module docstring); None when that order is unknown."""
    ids = [worker_id(m) for m in members]
    if all(i is not None for i in ids) and sorted(ids) == list(range(len(ids))):  # type: ignore[type-var]
        return [m for _, m in sorted(zip(ids, members, strict=True), key=lambda p: p[0] or 0)]
    suffixes = [_SUFFIX.search(str(m.get("name", ""))) for m in members]
    if any(s is None for s in suffixes):
        return None
    keyed = [(int(s[1]), m) for s, m in zip(suffixes, members, strict=True) if s is not None]
    if len({k for k, _ in keyed}) != len(keyed):
        return None
    return [m for _, m in sorted(keyed, key=lambda p: p[0])]


def _count(mig: Mapping[str, Any], action: str) -> int:
    actions = mig.get("currentActions")
    value = actions.get(action) if isinstance(actions, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _bulk_waiting(mig: Mapping[str, Any]) -> bool:
    status = mig.get("status")
    bulk = status.get("bulkInstanceOperation") if isinstance(status, Mapping) else None
    return isinstance(bulk, Mapping) and bulk.get("inProgress") is True


def _stable(mig: Mapping[str, Any]) -> bool:
    status = mig.get("status")
    return isinstance(status, Mapping) and status.get("isStable") is True


def slice_state(
    mig: Mapping[str, Any], statuses: Sequence[InstanceStatus], ordered: bool
) -> tuple[str, StateClass, str | None]:
    """(state, class, stuck rule) of a slice from its MIG and its members' statuses."""
    target = mig.get("targetSize")
    size = target if isinstance(target, int) and not isinstance(target, bool) else 0
    if _count(mig, "deleting") or _count(mig, "abandoning"):
        return _slice(SliceState.SLICE_DELETING)
    for status in statuses:
        cls, rule = INSTANCE_STATES[status]
        if cls in (K.DEAD, K.UNREADABLE):
            return status.value, cls, rule
    if _count(mig, "recreating"):
        return _slice(SliceState.SLICE_RECREATED)
    creating = _count(mig, "creating") + _count(mig, "creatingWithoutRetries")
    running = all(s is InstanceStatus.RUNNING for s in statuses)
    waiting = _bulk_waiting(mig)
    if len(statuses) < size and running and not creating and not waiting and _stable(mig):
        return _slice(SliceState.SLICE_INCOMPLETE)
    if InstanceStatus.PENDING in statuses or waiting:
        return _slice(SliceState.SLICE_PENDING)
    if running and len(statuses) == size and size:
        return _slice(SliceState.RUNNING if ordered else SliceState.SLICE_NO_WORKER_IDS)
    for status in statuses:
        cls, rule = INSTANCE_STATES[status]
        if cls in (K.TRANSIENT, K.DELETING):
            return status.value, cls, rule
    return _slice(SliceState.SLICE_CREATING)


def _slice(state: SliceState) -> tuple[str, StateClass, str | None]:
    cls, rule = SLICE_STATES[state]
    return state.value, cls, rule


def slice_from_json(
    zone: str,
    mig: Mapping[str, Any],
    members: Sequence[Mapping[str, Any]],
    ran: Mapping[str, str | None] | None = None,
) -> ObservedNode:
    """One slice as the planner sees it. `ran`: its members (name -> instance id) when it
    was last seen RUNNING: a member of another id since (recreated by the MIG, however
    quickly) makes it SLICE_RECREATED, since the workload of that worker is gone.
    MalformedResource for a MIG or member that has not the documented shape (the caller
    makes the zone unknown)."""
    name = mig.get("name")
    if not isinstance(name, str) or not name:
        raise MalformedResource(f"MIG without a name in zone {zone}: {raw_excerpt(name)}")
    what = f"MIG {name}"
    labels = mig_labels(mig) or {}
    nodes = [instance_from_json(zone, m) for m in members]  # each member checked as a node
    ordered = worker_order(members)
    statuses = [parse_status(m.get("status")) for m in members]
    state, cls, rule = slice_state(mig, statuses, ordered is not None)
    if (
        ran
        and cls is not K.DELETING
        and any(n.name in ran and ran[n.name] != n.cloud_id for n in nodes)
    ):
        state, cls, rule = _slice(SliceState.SLICE_RECREATED)
    explain = DEFECTS.get(state)
    defect = explain(len(members), mig.get("targetSize")) if explain else None
    by_name = {n.name: n for n in nodes}
    endpoints: list[WorkerEndpoint] = []
    for index, member in enumerate(ordered or ()):
        node = by_name[names.short_name(str(member["name"]))]
        if node.endpoints:
            first = node.endpoints[0]
            endpoints.append(WorkerEndpoint(index, first.internal_ip, first.external_ip))
    ends = [t for t in (run_end(m) for m in members) if t is not None]
    return ObservedNode(
        name=name,
        zone=zone,
        state=state,
        state_class=cls,
        stuck_rule=rule,
        accelerator_type=nodes[0].accelerator_type if nodes else "",
        labels=labels,
        cloud_id=optional_str(mig, "id", what),
        create_time=parse_time(mig.get("creationTimestamp")),
        endpoints=tuple(endpoints),
        made=nodes[0].made if nodes else None,
        run_ends_at=min(ends) if ends else None,
        maintenance=earliest([upcoming_maintenance(m) for m in members]),
        defect=defect,
    )


def _errors_of(block: object) -> Mapping[str, Any] | None:
    """`{errors: [...]}` when the block holds some (`lastAttempt.errors`, a check's `error`)."""
    if isinstance(block, Mapping) and isinstance(block.get("errors"), list) and block["errors"]:
        return block
    return None


def provisioning(
    mig: Mapping[str, Any], members: Sequence[Mapping[str, Any]], *, flex_start: bool = False
) -> tuple[bool, ApiError | None]:
    """(done, error) of a slice's creation, from instanceGroupManagers.get and
    listManagedInstances. Only CAPACITY and QUOTA end it: any other member error the MIG
    retries (INDIVIDUAL) and the slice's stuck timer times."""
    where = names.short_name(str(mig.get("selfLink") or mig.get("name") or "MIG"))
    found: list[Mapping[str, Any]] = []
    for member in members:
        attempt = member.get("lastAttempt")
        errors = _errors_of(attempt.get("errors") if isinstance(attempt, Mapping) else None)
        if errors is not None:
            found.append(errors)
    status = mig.get("status")
    bulk = status.get("bulkInstanceOperation") if isinstance(status, Mapping) else None
    check = bulk.get("lastProgressCheck") if isinstance(bulk, Mapping) else None
    bulk_errors = _errors_of(check.get("error") if isinstance(check, Mapping) else None)
    if bulk_errors is not None and not (flex_start or is_flex_start(mig)):
        found.append(bulk_errors)
    for errors in found:
        error = classify_compute_operation(errors, operation=where)
        if error.kind in (ErrorKind.CAPACITY, ErrorKind.QUOTA):
            return True, error
    target = mig.get("targetSize")
    # Done once every VM is past its making (RUNNING, or already lost: the list says so), as
    # a single VM's insert ends RUNNING: the wake that follows finds the slice READY, not one
    # poll interval early with its VMs still booting (then READY only at the next tick).
    made = [m for m in members if _made(m.get("instanceStatus"))]
    done = isinstance(target, int) and target > 0 and len(made) >= target
    return done, None


def _made(status: object) -> bool:
    if not status:
        return False
    cls, _ = INSTANCE_STATES[parse_status(status)]
    return cls not in (StateClass.CREATING, StateClass.WAITING)
