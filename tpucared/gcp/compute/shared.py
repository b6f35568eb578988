"""What a multi-host slice's MIG is made from, shared between slices: names, ensure, sweep.

- The workload policy: a regional resourcePolicy `{name, workloadPolicy: {type:
  HIGH_THROUGHPUT, acceleratorTopology: T}}`, one per (owner, topology) in a region, named
  `tpucared-wp-{topology}-{hash of the owner}` (an owner label may hold `_`, which a resource
  name may not), its `description` naming the owner (how `sweep` knows ours). Immutable: made
  once (GET, 404 -> insert; a racing insert's 409 -> GET again), and one of that name with
  another topology is refused (INVALID: it is not ours to replace).
- The instance template: global, content-addressed: `tpucared-{hash}` of its `properties`
  (bodies.py's instance body for the shape, with a bare machine type and disk type as
  templates take them), so two fleets of one spec share one and a changed spec makes a new
  one; its `properties.labels` carry our owner and fleet labels. GET, 404 -> insert, 409 ->
  it exists (the same name is the same body).
- `ensure_*` wait for their operation inside the call (the emulator answers them DONE;
  Google's are quick), polling no later than the caller's `ANSWER_BY` deadline: past it, a
  TRANSIENT error, and the next create finds the resource made.
- `sweep`: deletes our templates no MIG of ours in the zone uses and our workload policies
  in the zone's region no MIG there uses. Requests: one global template list, one regional
  policy list, one MIG list of the zone, one delete per unused resource. A template used by a
  MIG of another zone is refused deletion by the API (resourceInUseByAnotherResource): that
  refusal is logged and skipped, never an error of the sweep.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from tpucared.core.model.specs import OWNER_LABEL, ErrorKind
from tpucared.gcp.compute import bodies, names
from tpucared.gcp.compute.operation import Operation
from tpucared.gcp.errors import AlreadyExistsError, ApiError, NotFoundError
from tpucared.ports.cloud import ANSWER_BY, NodeShape

if TYPE_CHECKING:
    from tpucared.gcp.compute.client import ComputeClient

log = structlog.get_logger(__name__)

PREFIX = "tpucared-"
POLL_S = 0.5  # between two gets of a policy's or template's operation


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def owner_description(owner: str) -> str:
    return f"{OWNER_LABEL}={owner}"


def policy_name(owner: str, topology: str) -> str:
    return f"{PREFIX}wp-{topology}-{_digest(owner, 8)}"


def policy_body(owner: str, topology: str) -> dict[str, Any]:
    return {
        "name": policy_name(owner, topology),
        "description": owner_description(owner),
        "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": topology},
    }


def template_body(
    shape: NodeShape, zone: str, *, reservation: str | None, boot_disk_gb: int
) -> dict[str, Any]:
    """The global instance template for `shape`, named by a hash of its properties.
    ValueError as `bodies.instance_body`."""
    props = bodies.instance_body(
        shape, zone, "template", reservation=reservation, boot_disk_gb=boot_disk_gb
    )
    del props["name"]
    props.pop("description", None)
    props["machineType"] = names.short_name(props["machineType"])  # templates take bare names
    for disk in props["disks"]:
        params = disk.get("initializeParams")
        if isinstance(params, dict) and "diskType" in params:
            params["diskType"] = names.short_name(params["diskType"])
    name = PREFIX + _digest(json.dumps(props, sort_keys=True), 16)
    return {"name": name, "properties": props}


async def wait_done(client: ComputeClient, op: Operation, scope: str) -> None:
    """Follow a regional or global operation to DONE within the caller's deadline; raise its
    classified error if it failed."""
    while not op.done:
        deadline = ANSWER_BY.get()
        loop = asyncio.get_running_loop()
        if deadline is not None and loop.time() + POLL_S >= deadline:
            raise ApiError.of(ErrorKind.TRANSIENT, f"{op.path} not done by the deadline")
        await asyncio.sleep(POLL_S)
        op = await client.get_scoped_operation(scope, op.name)
    error = op.exception()
    if error is not None:
        raise error


def _topology(policy: Mapping[str, Any]) -> object:
    workload = policy.get("workloadPolicy")
    return workload.get("acceleratorTopology") if isinstance(workload, Mapping) else None


async def ensure_policy(
    client: ComputeClient, project: str, zone: str, owner: str, topology: str
) -> str:
    """The workload policy's URL path (made if missing). INVALID when one of its name holds
    another topology."""
    region = names.region_of(zone)
    body = policy_body(owner, topology)
    name = body["name"]
    try:
        found: Mapping[str, Any] | None = await client.get_policy(project, region, name)
    except NotFoundError:
        found = None
    if found is None:
        try:
            op = await client.insert_policy(project, region, body)
            await wait_done(client, op, names.region_path(project, region))
        except AlreadyExistsError:
            found = await client.get_policy(project, region, name)  # made by a racing create
    if found is not None and _topology(found) != topology:
        raise ApiError.of(
            ErrorKind.INVALID,
            f"workload policy {name} exists with topology {_topology(found)!r}, not {topology!r}",
        )
    return names.policy_path(project, region, name)


async def ensure_template(client: ComputeClient, project: str, body: Mapping[str, Any]) -> str:
    """The template's path (made if missing: its name is its content)."""
    name = str(body["name"])
    try:
        await client.get_template(project, name)
    except NotFoundError:
        try:
            op = await client.insert_template(project, body)
            await wait_done(client, op, names.global_path(project))
        except AlreadyExistsError:
            pass  # the same name is the same body
    return names.template_path(project, name)


def _owned_template(item: Mapping[str, Any], owner: str | None) -> bool:
    props = item.get("properties")
    labels = props.get("labels") if isinstance(props, Mapping) else None
    if not isinstance(labels, Mapping) or not str(item.get("name", "")).startswith(PREFIX):
        return False
    return labels.get(OWNER_LABEL) == owner if owner is not None else OWNER_LABEL in labels


def _owned_policy(item: Mapping[str, Any], owner: str | None) -> bool:
    if not str(item.get("name", "")).startswith(PREFIX):
        return False
    description = str(item.get("description") or "")
    return description == owner_description(owner) if owner is not None else bool(description)


async def sweep(
    client: ComputeClient, project: str, zone: str, owner: str | None
) -> tuple[str, ...]:
    """Start deleting our templates and workload policies that no MIG of the zone (region)
    uses; their names. Raises ApiError when a list fails."""
    region = names.region_of(zone)
    migs = await client.list_migs(
        project, zone, fields="nextPageToken,warning,items(name,instanceTemplate,resourcePolicies)"
    )
    used: set[str] = set()
    for mig in migs:
        if isinstance(tpl := mig.get("instanceTemplate"), str):
            used.add(names.short_name(tpl))
        policies = mig.get("resourcePolicies")
        if isinstance(policies, Mapping) and isinstance(wp := policies.get("workloadPolicy"), str):
            used.add(names.short_name(wp))
    templates = await client.list_templates(
        project, fields="nextPageToken,warning,items(name,properties(labels))"
    )
    policies = await client.list_policies(project, region)
    doomed: list[tuple[str, Any]] = [
        (str(t["name"]), lambda n: client.delete_template(project, n))
        for t in templates
        if _owned_template(t, owner) and t["name"] not in used
    ]
    doomed += [
        (str(p["name"]), lambda n: client.delete_policy(project, region, n))
        for p in policies
        if _owned_policy(p, owner) and p["name"] not in used
    ]
    deleted = []
    for name, delete in doomed:
        try:
            await delete(name)
        except NotFoundError:
            pass
        except ApiError as error:  # in use (by a MIG of another zone), or a blip: next sweep
            log.info("compute.sweep_skipped", project=project, resource=name, error=str(error))
            continue
        deleted.append(name)
    return tuple(deleted)
