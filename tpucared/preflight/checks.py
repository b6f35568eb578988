"""The checks: small async functions, each asking Google (or the emulator) a few read-only
questions and returning one `CheckResult` (results.py). What they conclude from the config
alone and from the answers is rules.py's; run.py gives each its own deadline.

An answer that says the daemon would fail (NOT_FOUND, a state, a permission missing, a type
not offered) is a FAIL with the fix; a read refused that the daemon itself never makes (a
network, a disk, an API's state) only leaves the thing unconfirmed: a WARN, naming the
permission that would let the check see it. A call that could not be made (a timeout, a 5xx,
a malformed answer) is caught by run.py and becomes a WARN saying so, costing only its own
check.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tpucared.config import Config
from tpucared.config.apis import APIS
from tpucared.config.syntax import COMPUTE_API
from tpucared.core.model.specs import ErrorKind, FleetSpec
from tpucared.gcp import ApiError, GoogleTokenSource, NoAuth, TokenSource
from tpucared.preflight import permissions, rules
from tpucared.preflight.client import PreflightClient
from tpucared.preflight.results import CheckResult, fail, ok, warn

JSON = dict[str, Any]
MISSING = (ErrorKind.NOT_FOUND, ErrorKind.PERMISSION)
ROLES_DOC = 'deploy/README.md, "Permissions, one by one"'


@dataclass
class Context:
    config: Config
    client: PreflightClient
    tokens: TokenSource
    # One answer per key shared by the checks that need it (quotaInfos, projects.get).
    _memo: dict[str, asyncio.Future[JSON]] = field(default_factory=dict)

    def project(self, fleet: FleetSpec) -> str:
        return rules.project_of(fleet, self.config.gcp.project)

    def projects(self) -> list[str]:
        found = [self.config.gcp.project] + [self.project(f) for f in self.config.fleets]
        return list(dict.fromkeys(found))

    async def once(self, key: str, call: Callable[[], Awaitable[JSON]]) -> JSON:
        if key not in self._memo:
            self._memo[key] = asyncio.ensure_future(call())
        # Shielded: a check that times out must not cancel the answer another one awaits.
        return await asyncio.shield(self._memo[key])

    async def once_list(self, key: str, call: Callable[[], Awaitable[list[JSON]]]) -> list[JSON]:
        async def wrapped() -> JSON:
            return {"items": await call()}

        answer = await self.once(key, wrapped)
        items: list[JSON] = answer["items"]
        return items

    def close(self) -> None:
        for future in self._memo.values():
            if future.done():
                if not future.cancelled():
                    future.exception()  # retrieved: no "never retrieved" noise
            else:
                future.cancel()


def _kind(exc: ApiError) -> ErrorKind:
    return exc.kind


def _said(exc: ApiError) -> str:
    return " ".join(str(exc.message or exc).split())[:300]


def _not_found(exc: ApiError, name: str, what: str, permission: str) -> CheckResult | None:
    """A Compute Engine read the daemon itself does not need: NOT_FOUND is the check's to
    judge (None), PERMISSION_DENIED only says it cannot be confirmed (a WARN); anything else
    is raised (run.py makes it a WARN too)."""
    if _kind(exc) is ErrorKind.NOT_FOUND or exc.http_status == 404:
        return None  # (an unknown project or zone is classified PERMISSION, gcp/errors.py)
    if _kind(exc) is ErrorKind.PERMISSION:
        return warn(
            name,
            f"cannot read {what} ({_said(exc)}): not confirmed",
            f"grant {permission} for the check to see it, or confirm it by hand",
        )
    raise exc


# -- who we are ------------------------------------------------------------------------------


async def credentials(ctx: Context) -> CheckResult:
    name = "credentials"
    if isinstance(ctx.tokens, NoAuth):
        return ok(name, 'none: no token is sent (credentials = "none", for an emulator)')
    try:
        await ctx.tokens.authorization()  # a refresh: the token itself is never shown
    except ApiError as exc:
        return fail(
            name,
            f"no token from {ctx.config.gcp.credentials!r}: {_said(exc)}",
            "`gcloud auth application-default login`, or gcp.credentials = a service "
            "account key file",
        )
    account = await ctx.tokens.account() if isinstance(ctx.tokens, GoogleTokenSource) else None
    if account is None:
        return ok(
            name, "a token for a person's account (ADC user credentials): the daemon acts as you"
        )
    return ok(name, f"a token for the service account {account}")


async def account_email(ctx: Context) -> str | None:
    if isinstance(ctx.tokens, GoogleTokenSource):
        return await ctx.tokens.account()
    return None


# -- projects --------------------------------------------------------------------------------


async def project(ctx: Context, project: str) -> CheckResult:
    name = f"project[{project}]"
    try:
        data = await ctx.once(f"crm:{project}", lambda: ctx.client.crm_project(project))
    except ApiError as exc:
        if _kind(exc) in MISSING:
            return fail(
                name,
                f"does not exist or this account may not see it ({_said(exc)})",
                "check gcp.project / the fleet's project; the account needs "
                "resourcemanager.projects.get there (roles/tpu.admin holds it)",
            )
        return fail(
            name,
            f"Cloud Resource Manager did not answer: {_said(exc)}",
            "check the network and gcp.endpoint, then run the check again",
        )
    state = data.get("lifecycleState", "ACTIVE")
    number = data.get("projectNumber", "?")
    if state != "ACTIVE":
        return fail(name, f"is {state} (number {number})", "use an ACTIVE project")
    return ok(name, f"ACTIVE, number {number}")


def services_needed(ctx: Context, project: str) -> list[str]:
    fleets = [f for f in ctx.config.fleets if ctx.project(f) == project]
    # Each fleet's API's Google service (none for a cloud that is not Google's), in the
    # registry's order: the TPU API's before Compute Engine's.
    used = {APIS[f.api].service for f in fleets}
    return [r.service for r in APIS.values() if r.service is not None and r.service in used]


async def service(ctx: Context, project: str, service_name: str) -> CheckResult:
    name = f"api[{project}/{service_name}]"
    enable = f"gcloud services enable {service_name} --project {project}"
    try:
        data = await ctx.client.service(project, service_name)
    except ApiError as exc:
        if _kind(exc) is ErrorKind.PERMISSION:
            return warn(
                name,
                f"cannot read its state ({_said(exc)})",
                "grant serviceusage.services.get (roles/serviceusage.serviceUsageViewer)"
                ", or confirm by hand: gcloud services list --enabled",
            )
        if _kind(exc) is ErrorKind.NOT_FOUND:
            return fail(name, "unknown to Service Usage", enable)
        raise
    state = data.get("state")
    if state != "ENABLED":
        return fail(name, f"is {state or 'not enabled'}", enable)
    return ok(name, "ENABLED")


async def project_permissions(ctx: Context, project: str) -> CheckResult:
    name = f"permissions[{project}]"
    fleets = [f for f in ctx.config.fleets if ctx.project(f) == project]
    wanted = permissions.needed(
        fleets, internal_ip=ctx.config.ssh.internal_ip, os_login=ctx.config.ssh.os_login
    )
    if not wanted:
        return ok(name, "no fleet lives here: nothing to test")
    held = set(await ctx.client.test_project_permissions(project, list(wanted)))
    missing = [p for p in wanted if p not in held]
    if missing:
        return fail(
            name,
            f"{len(missing)} of {len(wanted)} missing: {', '.join(missing)}",
            f"grant the roles in {ROLES_DOC} to the daemon's account in {project}",
        )
    return ok(name, f"all {len(wanted)} held")


# -- each fleet ------------------------------------------------------------------------------


async def offered(ctx: Context, fleet: FleetSpec, zone: str) -> CheckResult:
    name = f"type[{fleet.name}/{zone}]"
    project = ctx.project(fleet)
    try:
        if fleet.api == COMPUTE_API:
            await ctx.client.machine_type(project, zone, fleet.accelerator_type)
            what = f"machine type {fleet.accelerator_type}"
        else:
            await ctx.client.accelerator_type(project, zone, fleet.accelerator_type)
            what = f"accelerator type {fleet.accelerator_type}"
    except ApiError as exc:
        if _kind(exc) not in MISSING:
            raise
        if fleet.api == COMPUTE_API and exc.http_status == 403:
            # An unknown zone is 404 on Compute Engine (classified PERMISSION, gcp/errors.py),
            # 403 on the TPU API; a 403 here is the account's, not the zone's.
            return warn(
                name,
                f"cannot read the machine type ({_said(exc)}): not confirmed",
                "grant compute.machineTypes.get for the check to see it, or confirm it by hand",
            )
        how = (
            f"gcloud compute machine-types list --zones {zone} --filter 'name~^(ct|tpu)'"
            if fleet.api == COMPUTE_API
            else f"gcloud compute tpus accelerator-types list --zone {zone}"
        )
        return fail(
            name,
            f"{fleet.accelerator_type} is not offered in {zone} ({_said(exc)})",
            f"name a zone that offers it (see `{how}`)",
        )
    return ok(name, f"{what} offered in {zone}")


async def runtime_version(ctx: Context, fleet: FleetSpec, zone: str) -> CheckResult:
    name = f"runtime_version[{fleet.name}/{zone}]"
    version = rules.software(fleet)
    try:
        await ctx.client.runtime_version(ctx.project(fleet), zone, version)
    except ApiError as exc:
        if _kind(exc) not in MISSING:
            raise
        return fail(
            name,
            f"{version} is not offered in {zone} ({_said(exc)})",
            f"see `gcloud compute tpus versions list --zone {zone}`",
        )
    return ok(name, f"{version} offered in {zone}")


async def image(ctx: Context, fleet: FleetSpec) -> CheckResult:
    name = f"image[{fleet.name}]"
    path = rules.image_path(fleet)
    if path is None:
        return fail(name, f"no default image for {fleet.accelerator_type}", "set image")
    try:
        data = await ctx.client.image(path)
    except ApiError as exc:
        if _kind(exc) not in MISSING:
            raise
        return fail(
            name,
            f"{path} does not resolve ({_said(exc)})",
            "set image to an existing image or family (gcloud compute images list "
            "--project P --filter family~F)",
        )
    state = (data.get("deprecated") or {}).get("state")
    if state in ("OBSOLETE", "DELETED"):
        return fail(name, f"{path} -> {data.get('name')} is {state}", "name a newer image")
    resolved = f"{path} -> {data.get('name', '?')}"
    if state == "DEPRECATED":
        return warn(name, f"{resolved} is DEPRECATED", "name a newer image")
    return ok(name, resolved)


async def network(ctx: Context, fleet: FleetSpec) -> CheckResult:
    name = f"network[{fleet.name}]"
    path = rules.network_path(fleet.node.network, ctx.project(fleet))
    try:
        await ctx.client.resource("networks.get", path)
    except ApiError as exc:
        denied = _not_found(exc, name, "the network", "compute.networks.get")
        if denied is not None:
            return denied
        fix = (
            "the project has no default network: set the fleet's network (and subnetwork)"
            if fleet.node.network is None
            else "name an existing network"
        )
        return fail(name, f"{path} not found ({_said(exc)})", fix)
    return ok(name, f"{path} exists")


async def subnetwork(ctx: Context, fleet: FleetSpec, path: str) -> CheckResult:
    name = f"subnetwork[{fleet.name}/{rules.short(path)}]"
    outside = rules.regions_outside(path, fleet)
    if outside:
        return fail(
            name,
            f"{path} is not in the region of {', '.join(outside)}",
            "a VM's subnetwork must be in its zone's region: name one per region "
            "(a short name) or keep the fleet's zones in its region",
        )
    try:
        data = await ctx.client.resource("subnetworks.get", path)
    except ApiError as exc:
        denied = _not_found(exc, name, "the subnetwork", "compute.subnetworks.get")
        if denied is not None:
            return denied
        return fail(
            name,
            f"{path} not found ({_said(exc)})",
            "name an existing subnetwork of the fleet's region",
        )
    network_path = rules.network_path(fleet.node.network, ctx.project(fleet))
    belongs = str(data.get("network", ""))
    if belongs and not rules.same_network(belongs, network_path):
        return fail(
            name,
            f"{path} belongs to {rules.short(belongs)}, not {rules.short(network_path)}",
            "set the fleet's network to the subnetwork's",
        )
    return ok(name, f"{path} exists in {rules.short(network_path)}")


async def service_account(ctx: Context, fleet: FleetSpec) -> CheckResult:
    name = f"service_account[{fleet.name}]"
    email = fleet.node.service_account
    if email is None:
        project = ctx.project(fleet)
        data = await ctx.once(f"compute:{project}", lambda: ctx.client.compute_project(project))
        email = data.get("defaultServiceAccount")
        if not email:
            return fail(
                name, f"{project} has no default service account", "set the fleet's service_account"
            )
    try:
        account = await ctx.client.service_account(email)
    except ApiError as exc:
        if _kind(exc) is ErrorKind.NOT_FOUND:
            return fail(name, f"{email} does not exist", "create it or name another")
        if _kind(exc) is not ErrorKind.PERMISSION:
            raise
        account = {}  # not readable (iam.serviceAccounts.get): actAs below still tells
    if account.get("disabled"):
        return fail(name, f"{email} is disabled", f"gcloud iam service-accounts enable {email}")
    held = await ctx.client.test_account_permissions(email, ["iam.serviceAccounts.actAs"])
    if "iam.serviceAccounts.actAs" not in held:
        member = await account_email(ctx) or "THE_DAEMONS_ACCOUNT"
        return fail(
            name,
            f"no iam.serviceAccounts.actAs on {email}: nodes cannot run as it",
            f"gcloud iam service-accounts add-iam-policy-binding {email} --member "
            f"serviceAccount:{member} --role roles/iam.serviceAccountUser",
        )
    return ok(name, f"{email} exists; the daemon may act as it")


async def reservation(ctx: Context, fleet: FleetSpec, path: str) -> CheckResult:
    name = f"reservation[{fleet.name}]"
    path = rules.reservation_path(path, fleet, ctx.project(fleet))
    parts = path.split("/")  # projects/P/(zones|locations)/Z/reservations/R
    if parts[2] == "locations":  # the TPU API's: only listed (v2alpha1)
        found = await ctx.client.tpu_reservations(parts[1], parts[3])
        if not any(rules.short(str(r.get("name", ""))) == parts[5] for r in found):
            return fail(
                name,
                f"{path} not found among {len(found)} TPU reservations",
                f"see `gcloud alpha compute tpus reservations list --zone {parts[3]}`",
            )
        return ok(name, f"{path} exists")
    try:
        data = await ctx.client.resource("reservations.get", path)
    except ApiError as exc:
        denied = _not_found(exc, name, "the reservation", "compute.reservations.get")
        if denied is not None:
            return denied
        return fail(
            name,
            f"{path} not found ({_said(exc)})",
            f"see `gcloud compute reservations list --zones {parts[3]}`",
        )
    status = data.get("status", "READY")
    if status != "READY":
        return fail(name, f"{path} is {status}", "wait until it is READY or name another")
    spec = data.get("specificReservation") or {}
    machine = rules.short(str((spec.get("instanceProperties") or {}).get("machineType", "")))
    if machine and machine != fleet.accelerator_type:
        return fail(
            name,
            f"{path} reserves {machine}, not {fleet.accelerator_type}",
            "name a reservation of the fleet's machine type",
        )
    count, used = int(spec.get("count", 0) or 0), int(spec.get("inUseCount", 0) or 0)
    detail = f"{path} READY, {count - used} of {count} VMs free"
    if spec and count - used < fleet.nodes * fleet.hosts:
        return warn(name, detail + f": the fleet keeps {fleet.nodes * fleet.hosts}")
    return ok(name, detail)


async def data_disk(ctx: Context, fleet: FleetSpec, source: str) -> CheckResult:
    """The disk exists (the config already refuses one outside the fleet's one zone)."""
    name = f"data_disk[{fleet.name}/{rules.short(source)}]"
    try:
        data = await ctx.client.resource("disks.get", source)
    except ApiError as exc:
        denied = _not_found(exc, name, "the disk", "compute.disks.get")
        if denied is not None:
            return denied
        return fail(name, f"{source} not found ({_said(exc)})", "create it or name another")
    return ok(name, f"{source} exists ({data.get('sizeGb', '?')} GB, {data.get('status', '?')})")


async def quota(ctx: Context, fleet: FleetSpec, region: str) -> CheckResult:
    name = f"quota[{fleet.name}/{region}]"
    project, service = ctx.project(fleet), rules.quota_service(fleet)
    confirm = f"confirm it on the console: IAM & Admin > Quotas, service {service}"
    try:
        infos = await ctx.once_list(
            f"quotas:{project}/{service}", lambda: ctx.client.quota_infos(project, service)
        )
    except ApiError as exc:
        if _kind(exc) is not ErrorKind.PERMISSION:
            raise
        return warn(
            name,
            f"cannot list {service}'s quotas ({_said(exc)}): not checked",
            f"grant cloudquotas.quotas.get (roles/cloudquotas.viewer), or {confirm}",
        )
    kind = "preemptible" if "PREEMPTIBLE" in fleet.capacity.name else fleet.capacity.value
    answer = rules.match_quota(infos, fleet, region)
    if answer is None:
        return warn(
            name,
            f"no {kind} quota for {fleet.accelerator_type} in {region} among {len(infos)} "
            f"quotas of {service}: not checked",
            confirm,
        )
    per_node = rules.units_per_node(fleet)
    allowed = rules.nodes_allowed(answer, per_node)
    unit = f" {answer.unit}" if answer.unit not in ("", "1") else ""  # "1": a count
    if allowed is None:
        return ok(name, f"{answer.quota_id} in {region}: unlimited")
    detail = (
        f"{answer.quota_id} in {region}: {answer.limit}{unit}, room for {allowed} "
        f"{fleet.accelerator_type} at once ({per_node} each; what is in use not counted)"
    )
    if answer.limit <= 0:
        return fail(name, detail, "request quota: https://cloud.google.com/tpu/docs/quota")
    if allowed < fleet.nodes:
        return warn(
            name,
            f"{detail}; the fleet keeps {fleet.nodes}",
            "request more quota, or lower the fleet's size",
        )
    mine = [
        f
        for f in ctx.config.fleets
        if ctx.project(f) == project and rules.quota_service(f) == service
    ]
    shared = rules.sharing(infos, mine, region, answer.quota_id)
    demand = sum(rules.units_per_node(f) * f.nodes for f in shared)
    if len(shared) > 1 and demand > answer.limit:
        return warn(
            name,
            f"{detail}; with {', '.join(f.name for f in shared if f is not fleet)} the "
            f"fleets keep {demand}",
            "request more quota, or lower the fleets' sizes",
        )
    return ok(name, detail)


def guard(ctx: Context) -> CheckResult:
    """What the config's [guard] allows: the loader already refused any fleet outside it."""
    g = ctx.config.guard
    total = sum(f.nodes * f.hosts for f in ctx.config.fleets)
    if g is None:
        return ok("guard", f"no [guard]: the fleets ask {total} nodes and nothing limits them")
    room = "" if g.max_nodes is None else f" of the {g.max_nodes} allowed"
    return ok("guard", f"the fleets ask {total} nodes{room}; every fleet is within the guard")
