"""The instanceGroupManagers calls, zonal (`zones/z`) and regional (`regions/r`), onto migs.py.

    insert                 checks the body, stores the group, answers an operation already DONE
                           ("marked as DONE when the group is created even if the instances in the
                           group have not yet been created", research section 6.3)
    get / list             the group (status, currentActions, bulkInstanceOperation, ...)
    listManagedInstances   PAGELESS: every member, maxResults and pageToken ignored (section 6.4)
    delete                 an operation DONE when the last member is gone
    resize                 `compute_mig_resize_supported` (default no: a 400 whose wording is
                           ours, as no TPU error text is known; research §9 row 13)

What insert checks: the name, `baseInstanceName` (Google's pattern), `instanceTemplate` (URL or
path, global or of the group's region, existing), `targetSize` (0-1000), `targetSizePolicy.mode`,
`instanceLifecyclePolicy.defaultActionOnFailure`, and `resourcePolicies.workloadPolicy` (existing,
in the group's region; its topology's host count for the template's machine type, catalog.py's
TOPOLOGY_HOSTS, must equal targetSize: wording ours). A regional group needs
`distributionPolicy.targetShape: ANY_SINGLE_ZONE` (a slice lives in one zone) and puts every
member in one of `distributionPolicy.zones`: the first with room for the whole group, else the
first. requestId works as for instances.insert.
"""

from __future__ import annotations

import re
from typing import Any

from tpucared_emulator.catalog import TOPOLOGY_HOSTS
from tpucared_emulator.compute import errors, validation
from tpucared_emulator.compute.errors import ComputeError
from tpucared_emulator.compute.migs import Mig, Migs
from tpucared_emulator.compute.resources import API, ZoneOperation
from tpucared_emulator.compute.shared import Policy, Template, list_page
from tpucared_emulator.resources import region_of

_BASE = re.compile(r"[a-z](([-a-z0-9]{0,57})|([-a-z0-9]{0,51}-#{1,10}(\[[0-9]{1,10}\])?))")
_TEMPLATE = re.compile(
    rf"(?:{re.escape(API)}/)?(?:projects/([^/]+)/)?(global|regions/[^/]+)/instanceTemplates/([^/]+)"
)
_POLICY = re.compile(
    rf"(?:{re.escape(API)}/)?(?:projects/([^/]+)/)?regions/([^/]+)/resourcePolicies/([^/]+)"
)
_ZONE = re.compile(rf"(?:{re.escape(API)}/)?(?:projects/[^/]+/)?zones/([^/]+)")
MAX_SIZE = 1000  # "A managed instance group can have up to 1000 VM instances per group."


class MigRequests:
    def __init__(self, migs: Migs) -> None:
        self.migs = migs
        self.book = migs.book
        self.shared = migs.shared
        self.options = migs.options

    def _scope(self, project: str, scope: str) -> None:
        kind, _, where = scope.partition("/")
        if kind == "zones":
            self.book.check_zone(project, where)
        else:
            self.shared.check_region(project, where)

    def mig(self, project: str, scope: str, name: str) -> Mig:
        self._scope(project, scope)
        key = f"projects/{project}/{scope}/instanceGroupManagers/{name}"
        mig = self.migs.migs.get(key)
        if mig is None:
            raise errors.not_found(key)
        return mig

    # -----------------------------------------------------------------------------------------
    # insert.

    def insert(self, project: str, scope: str, body: object, raw_id: str | None) -> ZoneOperation:
        self._scope(project, scope)
        rid = validation.request_id(raw_id)
        book = self.book
        replay = book.replayed(project, "", rid, scope)
        if replay is not None and replay.operation_type == "insert":
            return replay
        if not isinstance(body, dict):
            raise errors.bad_request("Invalid JSON payload received. The body must be an object.")
        validation.name(body.get("name"))
        key = f"projects/{project}/{scope}/instanceGroupManagers/{body['name']}"
        if key in self.migs.migs:
            raise errors.already_exists(key)
        base = body.get("baseInstanceName")
        if not base:
            raise errors.required("resource.baseInstanceName")
        if not isinstance(base, str) or _BASE.fullmatch(base) is None:
            raise errors.invalid("resource.baseInstanceName", base, f"Must match {_BASE.pattern}")
        size = body.get("targetSize")
        if size is None:
            raise errors.required("resource.targetSize")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_SIZE:
            raise errors.invalid("resource.targetSize", size, f"Must be between 0 and {MAX_SIZE}.")
        _choice(body, "targetSizePolicy", "mode", ("BULK", "INDIVIDUAL", "UNSPECIFIED_MODE"))
        _choice(body, "instanceLifecyclePolicy", "defaultActionOnFailure", ("REPAIR", "DO_NOTHING"))
        region = scope.split("/")[1] if scope.startswith("regions/") else region_of(scope[6:])
        template = self._template(project, region, body)
        _bulk_rules(body, template)
        bulk = (body.get("targetSizePolicy") or {}).get("mode") == "BULK"
        if bulk and scope.startswith("zones/") and self.options.compute_bulk_zonal == "refuse":
            raise errors.invalid(  # wording ours: the refusal itself is a hypothesis
                "resource.targetSizePolicy.mode",
                "BULK",
                "Bulk mode is supported only in regional MIGs (ANY_SINGLE_ZONE).",
            )
        policy = self._policy(project, region, body, template, size)
        zone = scope[6:] if scope.startswith("zones/") else self._zone(region, body, template, size)
        mig = Mig(project=project, scope=scope, zone=zone, body=dict(body), template=template,
                  policy=policy, uid=book.uid(), now=book.now())  # fmt: skip
        # The template's body must make an instance of this zone (its machine type offered).
        validation.instance_body(
            {**template.properties, "name": "check", "machineType": f"zones/{zone}/machineTypes/"
             f"{template.machine.name}"}, zone, book.catalog,
            flex_min_run_seconds=self.options.compute_flex_min_run_seconds)  # fmt: skip
        self.migs.migs[key] = mig
        for used in (template.key, policy.key if policy else None):
            if used is not None:
                self.shared.users.setdefault(used, set()).add(key)
        if not mig.bulk:
            self.migs.add_members(mig, size)
        self.migs.poke(mig, 0.0)
        op = book.new_operation(project, zone, "insert", mig, request_id=rid, scope=scope)
        op.finish(book.now())
        return op

    def _template(self, project: str, region: str, body: dict[str, Any]) -> Template:
        raw = body.get("instanceTemplate") or next(
            (v.get("instanceTemplate") for v in body.get("versions") or [] if isinstance(v, dict)),
            None,
        )
        if not raw:
            raise errors.required("resource.instanceTemplate")
        match = _TEMPLATE.fullmatch(raw) if isinstance(raw, str) else None
        if match is None:
            raise errors.invalid("resource.instanceTemplate", raw)
        where = match[2]
        if where != "global" and where != f"regions/{region}":
            raise errors.invalid("resource.instanceTemplate", raw, "Must be of the group's region.")
        key = f"projects/{match[1] or project}/{where}/instanceTemplates/{match[3]}"
        template = self.shared.templates.get(key)
        if template is None:
            raise errors.not_found(key)
        return template

    def _policy(
        self, project: str, region: str, body: dict[str, Any], template: Template, size: int
    ) -> Policy | None:
        raw = (body.get("resourcePolicies") or {}).get("workloadPolicy")
        if not raw:
            return None
        field = "resource.resourcePolicies.workloadPolicy"
        match = _POLICY.fullmatch(raw) if isinstance(raw, str) else None
        if match is None:
            raise errors.invalid(field, raw)
        if match[2] != region:
            raise errors.invalid(field, raw, "Must be of the group's region.")
        key = f"projects/{match[1] or project}/regions/{match[2]}/resourcePolicies/{match[3]}"
        policy = self.shared.policies.get(key)
        if policy is None:
            raise errors.not_found(key)
        topology = policy.topology
        if topology is not None:
            machine = template.machine.name
            hosts = TOPOLOGY_HOSTS.get(machine, {}).get(topology)
            if hosts is None:  # wording ours
                raise errors.invalid(
                    field, raw, f"Accelerator topology {topology} is not valid for {machine}."
                )
            if hosts != size:
                raise errors.invalid(
                    "resource.targetSize",
                    size,
                    f"Accelerator topology {topology} of {machine} needs {hosts} instances.",
                )
        return policy

    def _zone(self, region: str, body: dict[str, Any], template: Template, size: int) -> str:
        distribution = body.get("distributionPolicy") or {}
        shape = distribution.get("targetShape", "EVEN")
        if shape != "ANY_SINGLE_ZONE":  # ours: a slice's VMs share one zone
            raise errors.invalid(
                "resource.distributionPolicy.targetShape",
                shape,
                "A group of TPU VMs needs ANY_SINGLE_ZONE.",
            )
        catalog, machine = self.book.catalog, template.machine.name
        zones = []
        for entry in distribution.get("zones") or []:
            match = _ZONE.fullmatch(str((entry or {}).get("zone", "")))
            if match is None or region_of(match[1]) != region:
                raise errors.invalid("resource.distributionPolicy.zones", entry)
            zones.append(match[1])
        if not zones:
            zones = [z for z in catalog.compute_zones() if region_of(z) == region]
        zones = [z for z in zones if catalog.offers_machine(z, machine)]
        if not zones:
            raise errors.invalid(
                "resource.distributionPolicy.zones", region, f"No zone offers {machine}."
            )
        state = self.book.state
        return next((z for z in zones if state.has_capacity(z, machine, size)), zones[0])

    # -----------------------------------------------------------------------------------------
    # Reads.

    def get(self, project: str, scope: str, name: str) -> dict[str, Any]:
        return self.mig(project, scope, name).to_json(self.book.instances)

    def list(self, project: str, scope: str, query: dict[str, str]) -> dict[str, Any]:
        self._scope(project, scope)
        parent = f"projects/{project}/{scope}/instanceGroupManagers"
        views = {k: _View(m, self.book.instances) for k, m in self.migs.migs.items()}
        kind = "compute#instanceGroupManagerList"
        if scope.startswith("regions/"):
            kind = "compute#regionInstanceGroupManagerList"
        return list_page(kind, parent, views, query, self.options.compute_empty_items_listed)

    def list_managed(self, project: str, scope: str, name: str) -> dict[str, Any]:
        mig = self.mig(project, scope, name)
        instances = self.book.instances
        members = [mig.managed_instance(m, instances.get(mig.member_key(m))) for m in mig.members]
        return {"managedInstances": members} if members else {}

    # -----------------------------------------------------------------------------------------
    # delete, resize.

    def delete(self, project: str, scope: str, name: str, raw_id: str | None) -> ZoneOperation:
        rid = validation.request_id(raw_id)
        replay = self.book.replayed(project, "", rid, scope)
        if replay is not None and replay.operation_type == "delete":
            return replay
        mig = self.mig(project, scope, name)
        running = self.book.ops.get(mig.delete_op or "")
        if running is not None and not running.done:
            return running
        op = self.book.new_operation(project, mig.zone, "delete", mig, request_id=rid, scope=scope)
        self.migs.start_delete(mig, op)
        return op

    def resize(
        self, project: str, scope: str, name: str, raw_size: str | None, raw_id: str | None
    ) -> ZoneOperation:
        rid = validation.request_id(raw_id)
        replay = self.book.replayed(project, "", rid, scope)
        if replay is not None and replay.operation_type == "resize":
            return replay
        mig = self.mig(project, scope, name)
        if not self.options.compute_mig_resize_supported:
            # Ours: Google documents no resize of a TPU slice ("delete and then recreate").
            raise ComputeError(
                400,
                "unsupportedOperation",
                "UNSUPPORTED_OPERATION: resizing a managed instance group of TPU VMs is not "
                "supported; delete the group and create it again.",
            )
        if raw_size is None or not raw_size.isdigit() or int(raw_size) > MAX_SIZE:
            raise errors.invalid("size", raw_size, f"Must be between 0 and {MAX_SIZE}.")
        size = int(raw_size)
        if mig.deleting:
            raise errors.not_ready(mig.key)
        kept = [m for m in mig.members if not m.removing]
        for member in kept[size:]:
            member.removing = True
        if mig.bulk and not kept and size:
            mig.bulk_waiting = True
        elif size > len(kept):
            self.migs.add_members(mig, size - len(kept))
        mig.target_size = size
        self.migs.poke(mig, 0.0)
        op = self.book.new_operation(project, mig.zone, "resize", mig, request_id=rid, scope=scope)
        op.finish(self.book.now())  # "marked DONE when the resize actions are scheduled"
        return op


class _View:
    """A group as a list renders it (list_page calls `to_json()`)."""

    def __init__(self, mig: Mig, instances: dict[str, Any]) -> None:
        self.mig, self.instances = mig, instances

    def to_json(self) -> dict[str, Any]:
        return self.mig.to_json(self.instances)


def _choice(body: dict[str, Any], block: str, key: str, allowed: tuple[str, ...]) -> None:
    value = (body.get(block) or {}).get(key)
    if value is not None and value not in allowed:
        raise errors.invalid(f"resource.{block}.{key}", value)


# Bulk mode's limits (compute/docs/instance-groups/about-bulk-mode, "Limitations"; issue 39):
# "Bulk mode in MIGs is only supported with instance templates that specify either a
# reservation-bound or flex-start provisioning model", and "If the MIG's instance template
# specifies the flex-start provisioning model, you must turn off repairs by setting
# defaultActionOnFailure to DO_NOTHING". Google's wording of either refusal is not known:
# these messages are ours.
BULK_MODELS = ("FLEX_START", "RESERVATION_BOUND")


def _bulk_rules(body: dict[str, Any], template: Template) -> None:
    policy = body.get("targetSizePolicy")
    if not isinstance(policy, dict) or policy.get("mode") != "BULK":
        return
    scheduling = template.properties.get("scheduling") or {}
    model = scheduling.get("provisioningModel", "STANDARD")
    if model not in BULK_MODELS:
        raise errors.invalid(
            "resource.targetSizePolicy.mode",
            "BULK",
            "Bulk mode in MIGs is only supported with instance templates that specify either "
            f"a reservation-bound or flex-start provisioning model, not {model}.",
        )
    lifecycle = body.get("instanceLifecyclePolicy") or {}
    if model == "FLEX_START" and lifecycle.get("defaultActionOnFailure") != "DO_NOTHING":
        raise errors.invalid(
            "resource.instanceLifecyclePolicy.defaultActionOnFailure",
            lifecycle.get("defaultActionOnFailure", "REPAIR"),
            "A bulk MIG of flex-start instances must not repair them: set DO_NOTHING.",
        )
