"""What managed instance groups are made from: workload policies and instance templates.

`Shared` owns both records and serves their calls (docs/research/compute-engine.md sections 6.1
and 6.2, §9 rows 25 and 28):

    resourcePolicies    projects/{p}/regions/{r}/resourcePolicies     insert / get / delete / list
    instanceTemplates   projects/{p}/global/instanceTemplates         insert / get / delete / list
                        projects/{p}/regions/{r}/instanceTemplates    (the same, regional)

A resource policy here is a workload policy (`workloadPolicy {type, acceleratorTopology,
acceleratorTopologyMode, maxTopologyDistance}`): immutable (no patch), a second insert of its
name is 409 `alreadyExists`. A template's `properties` are checked as an instance body is
(validation.py), its machine type a bare name. Either one is refused deletion (400
`resourceInUseByAnotherResource`) while a MIG uses it (compute/migs.py keeps `users`). Inserts
and deletes answer a regional or global operation, already DONE (the resource exists or is gone
when the call returns), and honour `requestId` as instances.insert does.
"""

from __future__ import annotations

import re
from typing import Any

from tpucared_emulator.catalog import MachineType
from tpucared_emulator.clock import rfc3339
from tpucared_emulator.compute import errors, filters, validation
from tpucared_emulator.compute.book import ComputeBook
from tpucared_emulator.compute.errors import ComputeError
from tpucared_emulator.compute.requests import max_results
from tpucared_emulator.compute.resources import API, ZoneOperation
from tpucared_emulator.paging import decode_token, encode_token
from tpucared_emulator.resources import region_of

_TOPOLOGY = re.compile(r"[1-9][0-9]*(x[1-9][0-9]*){1,2}")
_WORKLOAD = {
    "type": ("HIGH_AVAILABILITY", "HIGH_THROUGHPUT"),
    "acceleratorTopologyMode": ("AUTO_CONNECT", "PROVISION_ONLY"),
    "maxTopologyDistance": ("BLOCK", "CLUSTER", "SUBBLOCK"),
}


class Policy:
    """A regional resource policy holding a workload policy."""

    def __init__(self, project: str, region: str, body: dict[str, Any], uid: int, now: float):
        self.project, self.region, self.body = project, region, body
        self.name: str = body["name"]
        self.uid = uid
        self.create_time = now

    @property
    def key(self) -> str:
        return f"projects/{self.project}/regions/{self.region}/resourcePolicies/{self.name}"

    @property
    def self_link(self) -> str:
        return f"{API}/{self.key}"

    @property
    def topology(self) -> str | None:
        topology = (self.body.get("workloadPolicy") or {}).get("acceleratorTopology")
        return str(topology) if topology else None

    def to_json(self) -> dict[str, Any]:
        workload = {"acceleratorTopologyMode": "AUTO_CONNECT", **self.body["workloadPolicy"]}
        if "acceleratorTopology" not in workload:
            workload.pop("acceleratorTopologyMode")
        out: dict[str, Any] = {
            "kind": "compute#resourcePolicy",
            "id": str(self.uid),
            "creationTimestamp": rfc3339(self.create_time),
            "name": self.name,
            "region": f"{API}/projects/{self.project}/regions/{self.region}",
            "selfLink": self.self_link,
            "status": "READY",
            "workloadPolicy": workload,
        }
        if self.body.get("description"):
            out["description"] = self.body["description"]
        return out


class Template:
    """A global (region None) or regional instance template."""

    def __init__(
        self,
        project: str,
        region: str | None,
        body: dict[str, Any],
        machine: MachineType,
        uid: int,
        now: float,
    ) -> None:
        self.project, self.region, self.body, self.machine = project, region, body, machine
        self.name: str = body["name"]
        self.uid = uid
        self.create_time = now

    @property
    def key(self) -> str:
        scope = f"regions/{self.region}" if self.region else "global"
        return f"projects/{self.project}/{scope}/instanceTemplates/{self.name}"

    @property
    def self_link(self) -> str:
        return f"{API}/{self.key}"

    @property
    def properties(self) -> dict[str, Any]:
        properties: dict[str, Any] = self.body["properties"]
        return properties

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "compute#instanceTemplate",
            "id": str(self.uid),
            "creationTimestamp": rfc3339(self.create_time),
            "name": self.name,
            "properties": self.properties,
            "selfLink": self.self_link,
        }
        if self.region:
            out["region"] = f"{API}/projects/{self.project}/regions/{self.region}"
        if self.body.get("description"):
            out["description"] = self.body["description"]
        return out


class Shared:
    """Every project's workload policies and instance templates, and their calls."""

    def __init__(self, book: ComputeBook) -> None:
        self.book = book
        self._empty = book.options.compute_empty_items_listed
        self.reset()

    def reset(self) -> None:
        self.policies: dict[str, Policy] = {}
        self.templates: dict[str, Template] = {}
        self.users: dict[str, set[str]] = {}  # policy or template key -> keys of MIGs using it

    def snapshot(self) -> dict[str, Any]:
        """What the persisted state keeps (persistence.py, through the book)."""
        return {
            "policies": [[p.project, p.region, p.body, p.uid, p.create_time]
                         for p in self.policies.values()],
            "templates": [[t.project, t.region, t.body, t.uid, t.create_time]
                          for t in self.templates.values()],
        }  # fmt: skip

    def restore(self, snapshot: dict[str, Any]) -> None:
        for project, region, body, uid, created in snapshot.get("policies", []):
            policy = Policy(project, region, body, int(uid), float(created))
            self.policies[policy.key] = policy
        for project, region, body, uid, created in snapshot.get("templates", []):
            machine = validation.template_machine_type(body["properties"].get("machineType"))
            template = Template(project, region, body, machine, int(uid), float(created))
            self.templates[template.key] = template

    def check_region(self, project: str, region: str) -> None:
        if not any(region_of(z) == region for z in self.book.catalog.compute_zones()):
            raise errors.not_found(f"projects/{project}/regions/{region}")

    def _operation(
        self, project: str, scope: str, kind: str, target: Policy | Template, rid: str | None
    ) -> ZoneOperation:
        op = self.book.new_operation(project, "", kind, target, request_id=rid, scope=scope)
        op.finish(self.book.now())
        return op

    def _refuse_in_use(self, key: str) -> None:
        users = sorted(self.users.get(key, ()))
        if users:
            message = f"The {_noun(key)} resource '{key}' is already being used by '{users[0]}'"
            raise ComputeError(400, "resourceInUseByAnotherResource", message)

    # -----------------------------------------------------------------------------------------
    # resourcePolicies (regional).

    def insert_policy(
        self, project: str, region: str, body: object, raw_id: str | None
    ) -> ZoneOperation:
        self.check_region(project, region)
        scope = f"regions/{region}"
        rid = validation.request_id(raw_id)
        replay = self.book.replayed(project, "", rid, scope)
        if replay is not None and replay.operation_type == "insert":
            return replay
        spec = _policy_body(body)
        policy = Policy(project, region, spec, self.book.uid(), self.book.now())
        if policy.key in self.policies:
            raise errors.already_exists(policy.key)
        self.policies[policy.key] = policy
        return self._operation(project, scope, "insert", policy, rid)

    def policy(self, project: str, region: str, name: str) -> Policy:
        self.check_region(project, region)
        key = f"projects/{project}/regions/{region}/resourcePolicies/{name}"
        if key not in self.policies:
            raise errors.not_found(key)
        return self.policies[key]

    def delete_policy(
        self, project: str, region: str, name: str, raw_id: str | None
    ) -> ZoneOperation:
        rid = validation.request_id(raw_id)
        replay = self.book.replayed(project, "", rid, f"regions/{region}")
        if replay is not None and replay.operation_type == "delete":
            return replay
        policy = self.policy(project, region, name)
        self._refuse_in_use(policy.key)
        del self.policies[policy.key]
        return self._operation(project, f"regions/{region}", "delete", policy, rid)

    def list_policies(self, project: str, region: str, query: dict[str, str]) -> dict[str, Any]:
        self.check_region(project, region)
        parent = f"projects/{project}/regions/{region}/resourcePolicies"
        return list_page("compute#resourcePolicyList", parent, self.policies, query, self._empty)

    # -----------------------------------------------------------------------------------------
    # instanceTemplates (global, or regional: region).

    def insert_template(
        self, project: str, region: str | None, body: object, raw_id: str | None
    ) -> ZoneOperation:
        scope = _template_scope(self, project, region)
        rid = validation.request_id(raw_id)
        replay = self.book.replayed(project, "", rid, scope)
        if replay is not None and replay.operation_type == "insert":
            return replay
        if not isinstance(body, dict):
            raise errors.bad_request("Invalid JSON payload received. The body must be an object.")
        validation.name(body.get("name"))
        properties = body.get("properties")
        if not isinstance(properties, dict):
            raise errors.required("resource.properties")
        machine = validation.template_machine_type(properties.get("machineType"))
        validation.properties(properties, self.book.options.compute_flex_min_run_seconds)
        template = Template(project, region, dict(body), machine, self.book.uid(), self.book.now())
        if template.key in self.templates:
            raise errors.already_exists(template.key)
        self.templates[template.key] = template
        return self._operation(project, scope, "insert", template, rid)

    def template(self, project: str, region: str | None, name: str) -> Template:
        scope = _template_scope(self, project, region)
        key = f"projects/{project}/{scope}/instanceTemplates/{name}"
        if key not in self.templates:
            raise errors.not_found(key)
        return self.templates[key]

    def delete_template(
        self, project: str, region: str | None, name: str, raw_id: str | None
    ) -> ZoneOperation:
        scope = _template_scope(self, project, region)
        rid = validation.request_id(raw_id)
        replay = self.book.replayed(project, "", rid, scope)
        if replay is not None and replay.operation_type == "delete":
            return replay
        template = self.template(project, region, name)
        self._refuse_in_use(template.key)
        del self.templates[template.key]
        return self._operation(project, scope, "delete", template, rid)

    def list_templates(
        self, project: str, region: str | None, query: dict[str, str]
    ) -> dict[str, Any]:
        scope = _template_scope(self, project, region)
        parent = f"projects/{project}/{scope}/instanceTemplates"
        return list_page("compute#instanceTemplateList", parent, self.templates, query, self._empty)


def _template_scope(shared: Shared, project: str, region: str | None) -> str:
    if region is None:
        return "global"
    shared.check_region(project, region)
    return f"regions/{region}"


def _noun(key: str) -> str:
    return "resource policy" if "/resourcePolicies/" in key else "instance template"


def _policy_body(body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise errors.bad_request("Invalid JSON payload received. The body must be an object.")
    validation.name(body.get("name"))
    workload = body.get("workloadPolicy")
    if not isinstance(workload, dict):
        # Ours: the emulator serves workload policies only (no schedules, no placement).
        raise errors.required("resource.workloadPolicy")
    if "type" not in workload:
        raise errors.required("resource.workloadPolicy.type")
    for key, allowed in _WORKLOAD.items():
        if key in workload and workload[key] not in allowed:
            raise errors.invalid(f"resource.workloadPolicy.{key}", workload[key])
    topology = workload.get("acceleratorTopology")
    if topology is not None and (
        not isinstance(topology, str) or _TOPOLOGY.fullmatch(topology) is None
    ):
        raise errors.invalid("resource.workloadPolicy.acceleratorTopology", topology)
    if topology is not None and "maxTopologyDistance" in workload:
        raise errors.invalid(
            "resource.workloadPolicy.maxTopologyDistance",
            workload["maxTopologyDistance"],
            "acceleratorTopology and maxTopologyDistance are mutually exclusive.",
        )
    return dict(body)


def list_page(
    kind: str, parent: str, records: dict[str, Any], query: dict[str, str], empty_listed: bool
) -> dict[str, Any]:
    """One page of the records under `parent` (their keys are `parent/name`), by name, with
    `filter`, `maxResults` and `pageToken` as instances.list takes them."""
    match = filters.parse(query.get("filter"))
    size = max_results(query.get("maxResults"))
    last = decode_token(query.get("pageToken"), parent)
    prefix = parent + "/"
    names = sorted(k.removeprefix(prefix) for k in records if k.startswith(prefix))
    items: list[dict[str, Any]] = []
    token = None
    for name in names:
        if last is not None and name <= last:
            continue
        rendered = records[prefix + name].to_json()
        if match(rendered):
            if len(items) == size:
                token = encode_token(parent, items[-1]["name"])
                break
            items.append(rendered)
    out: dict[str, Any] = {"kind": kind, "id": parent}
    if items or empty_listed:
        out["items"] = items
    if token:
        out["nextPageToken"] = token
    out["selfLink"] = f"{API}/{parent}"
    return out
