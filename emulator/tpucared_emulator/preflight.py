"""The read calls `tpucared check` makes (tpucared/preflight/), served on the emulator's port,
and the control that makes each check fail.

Google serves these from six APIs; the emulator answers them all at their real paths:

    GET  /v1/projects/{p}                                  Cloud Resource Manager projects.get
    POST /v1/projects/{p}:testIamPermissions               ... projects.testIamPermissions
    GET  /v1/projects/{p}/services/{service}               Service Usage services.get
    GET  /v1/projects/-/serviceAccounts/{email}            IAM serviceAccounts.get
    GET  /v1/projects/{p}/locations/global/services/{s}/quotaInfos   Cloud Quotas (one page)
    POST /v1/projects/-/serviceAccounts/{email}:testIamPermissions
    GET  /v2alpha1/projects/{p}/locations/{z}/reservations TPU reservations.list
    GET  /compute/v1/projects/{p}                          Compute Engine projects.get
    GET  /compute/v1/projects/{p}/global/images/family/{f} images.getFromFamily
    GET  /compute/v1/projects/{p}/global/images/{i}        images.get
    GET  /compute/v1/projects/{p}/global/networks/{n}      networks.get
    GET  /compute/v1/projects/{p}/regions/{r}/subnetworks/{s}   subnetworks.get
    GET  /compute/v1/projects/{p}/zones/{z}/reservations/{r}    reservations.get
    GET  /compute/v1/projects/{p}/zones/{z}/disks/{d}      disks.get

acceleratorTypes, runtimeVersions and machineTypes come from the catalog (api.py,
compute/api.py). By default every project, API, permission, image, network, subnetwork,
service account, Compute Engine reservation and disk exists and is allowed, in every region
of the catalog; `tpu.googleapis.com` lists an on-demand and a preemptible quota of 4096 for
each TPU version (ids as the one Google was seen to name, `TPU{V}[Preemptible]PerProject
PerRegionForTPUAPI`), Compute Engine none. The control makes each one fail:

    PUT    /_emulator/v1/preflight  {"denied_permissions": [...], "disabled_services": [...],
           "missing": [paths], "resources": {path: {fields laid over the answer}},
           "quotas": {service: {quotaId: {region or "*": value}}},
           "tpu_reservations": [names], "hang": [calls]}
    GET    /_emulator/v1/preflight  the settings;  DELETE: back to the defaults

`denied_permissions` also refuses the reads that need them (403): `cloudquotas.quotas.get`,
`serviceusage.services.get`, and `compute.networks.get` and the like for the Compute Engine
reads above. `missing` paths are as the API names them (`projects/p`,
`projects/p/global/networks/n`, `projects/-/serviceAccounts/e`, `projects/p/services/s`, ...);
`hang` names calls (`quotaInfos.list`, `services.get`, ...) that do not answer while named
(a minute at most). Answers follow the API references' shapes (`quotaInfos[{quotaId,
metricUnit, dimensionsInfos}]`; int64 fields, quota values too, as strings); errors are each
API's envelope (compute's for /compute/v1). The /compute/v1 and /v2 calls go through the
request log and faults like every other; the /v1 (Resource Manager, Service Usage, IAM, Cloud
Quotas) and /v2alpha1 ones, like /_emulator, do not (middleware.py `LOGGED_PREFIXES`): `hang`
and the settings above are how they fail.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tpucared_emulator import errors
from tpucared_emulator.compute import errors as compute_errors
from tpucared_emulator.control_body import json_object
from tpucared_emulator.projects import project_number
from tpucared_emulator.state import EmulatorState

PREFIX = "/_emulator/v1/preflight"
API = "https://www.googleapis.com/compute/v1"
JsonDict = dict[str, Any]
DEFAULT_QUOTA = 4096
TPU_VERSIONS = ("V2", "V3", "V4", "V5P", "V5sLitepod", "V6E")


def default_quota_ids() -> list[str]:
    """The TPU API's quotas the emulator lists by default: on-demand and preemptible per
    version, ids in the one shape Google was seen to use."""
    return [
        f"TPU{v}{kind}PerProjectPerRegionForTPUAPI"
        for v in TPU_VERSIONS
        for kind in ("", "Preemptible")
    ]


@dataclass
class PreflightSettings:
    denied_permissions: set[str] = field(default_factory=set)
    disabled_services: set[str] = field(default_factory=set)
    missing: set[str] = field(default_factory=set)
    resources: dict[str, JsonDict] = field(default_factory=dict)
    quotas: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    tpu_reservations: list[str] = field(default_factory=list)
    hang: set[str] = field(default_factory=set)

    def to_json(self) -> JsonDict:
        return {
            "denied_permissions": sorted(self.denied_permissions),
            "disabled_services": sorted(self.disabled_services),
            "missing": sorted(self.missing),
            "resources": self.resources,
            "quotas": self.quotas,
            "tpu_reservations": self.tpu_reservations,
            "hang": sorted(self.hang),
        }

    @classmethod
    def from_json(cls, body: JsonDict) -> PreflightSettings:
        lists = ("denied_permissions", "disabled_services", "missing", "tpu_reservations", "hang")
        maps = ("resources", "quotas")
        unknown = set(body) - set(lists) - set(maps)
        if unknown:
            raise errors.invalid_argument(f"unknown preflight settings {sorted(unknown)}")
        for key in lists:
            value = body.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise errors.invalid_argument(f"{key} must be a list of strings")
        for key in maps:
            if not isinstance(body.get(key, {}), dict):
                raise errors.invalid_argument(f"{key} must be an object")
        return cls(
            denied_permissions=set(body.get("denied_permissions", [])),
            disabled_services=set(body.get("disabled_services", [])),
            missing=set(body.get("missing", [])),
            resources=dict(body.get("resources", {})),
            quotas=dict(body.get("quotas", {})),
            tpu_reservations=list(body.get("tpu_reservations", [])),
            hang=set(body.get("hang", [])),
        )


class PreflightApi:
    def __init__(self, state: EmulatorState) -> None:
        self.state = state
        self.settings = PreflightSettings()

    def add_routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/v1/projects/{project}", self.crm_project)
        r.add_post("/v1/projects/{project_verb}", self.crm_test)
        r.add_get("/v1/projects/{project}/services/{service}", self.service)
        r.add_get("/v1/projects/-/serviceAccounts/{email}", self.account)
        r.add_post("/v1/projects/-/serviceAccounts/{email_verb}", self.account_test)
        r.add_get("/v2alpha1/projects/{project}/locations/{zone}/reservations", self.tpu_list)
        quotas = "/v1/projects/{project}/locations/global/services/{service}/quotaInfos"
        r.add_get(quotas, self.quota_infos)
        c = "/compute/v1/projects/{project}"
        r.add_get(c, self.compute_project)
        r.add_get(c + "/global/images/family/{family}", self.image_family)
        r.add_get(c + "/global/images/{image}", self.image)
        r.add_get(c + "/global/networks/{network}", self.network)
        r.add_get(c + "/regions/{region}/subnetworks/{subnetwork}", self.subnetwork)
        r.add_get(c + "/zones/{zone}/reservations/{reservation}", self.reservation)
        r.add_get(c + "/zones/{zone}/disks/{disk}", self.disk)
        r.add_get(PREFIX, self.get_settings)
        r.add_put(PREFIX, self.put_settings)
        r.add_delete(PREFIX, self.reset)

    # -- control -------------------------------------------------------------------------

    async def get_settings(self, _: web.Request) -> web.Response:
        return web.json_response(self.settings.to_json())

    async def put_settings(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.text() or "{}")
        except ValueError:
            raise errors.invalid_argument("the body must be JSON") from None
        if not isinstance(body, dict):
            raise errors.invalid_argument("the body must be a JSON object")
        self.settings = PreflightSettings.from_json(body)
        return web.json_response(self.settings.to_json())

    async def reset(self, _: web.Request) -> web.Response:
        self.settings = PreflightSettings()
        return web.json_response(self.settings.to_json())

    # -- shared --------------------------------------------------------------------------

    async def _answer(self, call: str, path: str, body: JsonDict, *, compute: bool) -> web.Response:
        await self._hang(call)
        if compute and f"compute.{call}" in self.settings.denied_permissions:
            # Compute Engine's words for a read the caller may not make (HTTP 403 forbidden).
            message = f"Required 'compute.{call}' permission for '{path}'"
            raise compute_errors.ComputeError(403, "forbidden", message)
        if path in self.settings.missing:
            raise compute_errors.not_found(path) if compute else errors.not_found(path)
        return web.json_response({**body, **self.settings.resources.get(path, {})})

    async def _hang(self, call: str) -> None:
        for _ in range(1200):  # "never" answers: until the setting goes, at most a minute
            if call not in self.settings.hang:
                return
            await asyncio.sleep(0.05)

    def _regions(self) -> set[str]:
        catalog = self.state.catalog
        zones = [*catalog.zones(), *catalog.compute_zones()]
        return {z.rpartition("-")[0] for z in zones}

    def _zone(self, zone: str, path: str) -> None:
        catalog = self.state.catalog
        if not (catalog.has_zone(zone) or catalog.has_compute_zone(zone)):
            raise compute_errors.not_found(path)

    def _granted(self, body: JsonDict) -> JsonDict:
        asked = body.get("permissions", [])
        if not isinstance(asked, list):
            raise errors.invalid_argument("permissions must be a list", "permissions")
        return {"permissions": [p for p in asked if p not in self.settings.denied_permissions]}

    # -- Resource Manager, Service Usage, IAM --------------------------------------------

    async def crm_project(self, request: web.Request) -> web.Response:
        project = request.match_info["project"]
        body = {
            "projectNumber": project_number(project),
            "projectId": project,
            "lifecycleState": "ACTIVE",
            "name": project,
        }
        return await self._answer("projects.get", f"projects/{project}", body, compute=False)

    async def crm_test(self, request: web.Request) -> web.Response:
        project, _, verb = request.match_info["project_verb"].partition(":")
        if verb != "testIamPermissions":
            raise web.HTTPNotFound()
        if f"projects/{project}" in self.settings.missing:
            raise errors.permission_denied("resourcemanager.projects.get", f"projects/{project}")
        return web.json_response(self._granted(await json_object(request)))

    async def service(self, request: web.Request) -> web.Response:
        project, name = request.match_info["project"], request.match_info["service"]
        if "serviceusage.services.get" in self.settings.denied_permissions:
            raise errors.permission_denied("serviceusage.services.get", f"projects/{project}")
        number = project_number(project)
        state = "DISABLED" if name in self.settings.disabled_services else "ENABLED"
        body = {
            "name": f"projects/{number}/services/{name}",
            "parent": f"projects/{number}",
            "state": state,
            "config": {"name": name},
        }
        path = f"projects/{project}/services/{name}"
        return await self._answer("services.get", path, body, compute=False)

    async def account(self, request: web.Request) -> web.Response:
        email = request.match_info["email"]
        project = email.partition("@")[2].partition(".")[0]
        body = {
            "name": f"projects/{project}/serviceAccounts/{email}",
            "email": email,
            "projectId": project,
            "uniqueId": str(zlib.crc32(email.encode())).zfill(21),
            "disabled": False,
        }
        path = f"projects/-/serviceAccounts/{email}"
        return await self._answer("serviceAccounts.get", path, body, compute=False)

    async def account_test(self, request: web.Request) -> web.Response:
        email, _, verb = request.match_info["email_verb"].partition(":")
        if verb != "testIamPermissions":
            raise web.HTTPNotFound()
        if f"projects/-/serviceAccounts/{email}" in self.settings.missing:
            raise errors.not_found(f"projects/-/serviceAccounts/{email}")
        return web.json_response(self._granted(await json_object(request)))

    async def tpu_list(self, request: web.Request) -> web.Response:
        project, zone = request.match_info["project"], request.match_info["zone"]
        if not self.state.catalog.has_zone(zone):
            raise errors.location_not_found(zone)
        parent = f"projects/{project}/locations/{zone}/"
        found = [{"name": n} for n in self.settings.tpu_reservations if n.startswith(parent)]
        return web.json_response({"reservations": found} if found else {})

    async def quota_infos(self, request: web.Request) -> web.Response:
        project, service = request.match_info["project"], request.match_info["service"]
        await self._hang("quotaInfos.list")
        if "cloudquotas.quotas.get" in self.settings.denied_permissions:
            raise errors.permission_denied("cloudquotas.quotas.get", f"projects/{project}")
        defaults = default_quota_ids() if service == "tpu.googleapis.com" else []
        values: dict[str, dict[str, int]] = {q: {"*": DEFAULT_QUOTA} for q in defaults}
        values.update(self.settings.quotas.get(service, {}))
        parent = f"projects/{project_number(project)}/locations/global/services/{service}"
        infos = [_quota_info(parent, service, q, v) for q, v in sorted(values.items())]
        return web.json_response({"quotaInfos": infos})

    # -- Compute Engine ------------------------------------------------------------------

    async def compute_project(self, request: web.Request) -> web.Response:
        project = request.match_info["project"]
        number = project_number(project)
        body = {
            "kind": "compute#project",
            "name": project,
            "id": number,
            "defaultServiceAccount": f"{number}-compute@developer.gserviceaccount.com",
            "selfLink": f"{API}/projects/{project}",
        }
        return await self._answer("projects.get", f"projects/{project}", body, compute=True)

    async def image_family(self, request: web.Request) -> web.Response:
        project, family = request.match_info["project"], request.match_info["family"]
        path = f"projects/{project}/global/images/family/{family}"
        body = {
            "kind": "compute#image",
            "name": f"{family}-v20251101",
            "family": family,
            "status": "READY",
            "selfLink": f"{API}/projects/{project}/global/images/{family}-v20251101",
        }
        return await self._answer("images.getFromFamily", path, body, compute=True)

    async def image(self, request: web.Request) -> web.Response:
        project, image = request.match_info["project"], request.match_info["image"]
        path = f"projects/{project}/global/images/{image}"
        body = {
            "kind": "compute#image",
            "name": image,
            "status": "READY",
            "selfLink": f"{API}/{path}",
        }
        return await self._answer("images.get", path, body, compute=True)

    async def network(self, request: web.Request) -> web.Response:
        project, network = request.match_info["project"], request.match_info["network"]
        path = f"projects/{project}/global/networks/{network}"
        body = {
            "kind": "compute#network",
            "name": network,
            "selfLink": f"{API}/{path}",
            "autoCreateSubnetworks": network == "default",
        }
        return await self._answer("networks.get", path, body, compute=True)

    async def subnetwork(self, request: web.Request) -> web.Response:
        m = request.match_info
        path = f"projects/{m['project']}/regions/{m['region']}/subnetworks/{m['subnetwork']}"
        if m["region"] not in self._regions():
            raise compute_errors.not_found(path)
        body = {
            "kind": "compute#subnetwork",
            "name": m["subnetwork"],
            "region": f"{API}/projects/{m['project']}/regions/{m['region']}",
            "network": f"{API}/projects/{m['project']}/global/networks/default",
            "ipCidrRange": "10.128.0.0/20",
            "selfLink": f"{API}/{path}",
        }
        return await self._answer("subnetworks.get", path, body, compute=True)

    async def reservation(self, request: web.Request) -> web.Response:
        m = request.match_info
        path = f"projects/{m['project']}/zones/{m['zone']}/reservations/{m['reservation']}"
        self._zone(m["zone"], path)
        body = {
            "kind": "compute#reservation",
            "name": m["reservation"],
            "status": "READY",
            "zone": f"{API}/projects/{m['project']}/zones/{m['zone']}",
            "specificReservation": {"count": "64", "inUseCount": "0"},
            "selfLink": f"{API}/{path}",
        }
        return await self._answer("reservations.get", path, body, compute=True)

    async def disk(self, request: web.Request) -> web.Response:
        m = request.match_info
        path = f"projects/{m['project']}/zones/{m['zone']}/disks/{m['disk']}"
        self._zone(m["zone"], path)
        body = {
            "kind": "compute#disk",
            "name": m["disk"],
            "sizeGb": "100",
            "status": "READY",
            "zone": f"{API}/projects/{m['project']}/zones/{m['zone']}",
            "selfLink": f"{API}/{path}",
        }
        return await self._answer("disks.get", path, body, compute=True)


def _quota_info(parent: str, service: str, quota_id: str, values: dict[str, int]) -> JsonDict:
    infos = [
        {
            "dimensions": {} if where == "*" else {"region": where},
            "details": {"value": str(value)},
            "applicableLocations": [] if where == "*" else [where],
        }
        for where, value in sorted(values.items())
    ]
    return {
        "name": f"{parent}/quotaInfos/{quota_id}",
        "quotaId": quota_id,
        "metric": f"{service}/{quota_id.lower()}",
        "service": service,
        "isPrecise": True,
        "containerType": "PROJECT",
        "dimensions": ["region"],
        "metricUnit": "1",
        "dimensionsInfos": infos,
    }
