"""`PreflightClient`: the read-only Google calls `tpucared check` makes, over `RestClient`.

The request path (auth, the 401 refresh, retries, bounded phases, classification into
`ApiError`) is gcp/rest.py's; this module only builds each API's URL. Nothing here writes:
every call is a GET, or a POST that Google documents as a read (`testIamPermissions`).

Against Google each API has its own host; against an emulator (`gcp.endpoint` not Google's
TPU API) every one of them is the emulator's own address, as gcp/compute/names.py
`endpoint_for` does for Compute Engine (the emulator serves them all on one port,
emulator/tpucared_emulator/preflight.py). The calls and their sources:

- Cloud Resource Manager v1 `projects.get` (`GET /v1/projects/{p}`: `lifecycleState`,
  `projectNumber`) and `projects.testIamPermissions` (`POST /v1/projects/{p}:
  testIamPermissions` `{"permissions": [...]}` -> the subset the caller has):
  https://cloud.google.com/resource-manager/reference/rest/v1/projects
- Service Usage v1 `services.get` (`GET /v1/projects/{p}/services/{name}` -> `state`
  ENABLED | DISABLED): https://cloud.google.com/service-usage/docs/reference/rest/v1/services/get
- IAM v1 `projects.serviceAccounts.get` (`GET /v1/projects/-/serviceAccounts/{email}`) and
  `testIamPermissions` on the account (`POST .../{email}:testIamPermissions`):
  https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts
- TPU v2 `acceleratorTypes.get`, `runtimeVersions.get` (the discovery document,
  ../shared/reference/tpu.v2.discovery.*.json), and v2alpha1 `reservations.list`
  (tpu.v2alpha1.discovery: `projects/{p}/locations/{z}/reservations`).
- Cloud Quotas v1 `quotaInfos.list` (`GET /v1/projects/{p}/locations/global/services/{s}/
  quotaInfos`, paged): https://cloud.google.com/docs/quotas/reference/rest/v1/
  projects.locations.services.quotaInfos
- Compute Engine v1 `projects.get` (`defaultServiceAccount`), `machineTypes.get`,
  `images.getFromFamily` / `images.get`, `networks.get`, `subnetworks.get`,
  `reservations.get`, `disks.get`: the discovery document and the official client's types
  (google.cloud.compute_v1 `Project`, `Image`, `Network`, `Subnetwork`, `Reservation`, `Disk`).
"""

from __future__ import annotations

from typing import ClassVar

from tpucared.gcp.compute import names as compute_names
from tpucared.gcp.rest import JSON, RestClient

TPU_ENDPOINT = compute_names.TPU_ENDPOINT
GOOGLE = {
    "compute": compute_names.DEFAULT_ENDPOINT,
    "crm": "https://cloudresourcemanager.googleapis.com",
    "serviceusage": "https://serviceusage.googleapis.com",
    "iam": "https://iam.googleapis.com",
    "cloudquotas": "https://cloudquotas.googleapis.com",
}


class PreflightClient(RestClient):
    """Read calls across the APIs a config needs. `endpoint`: the config's `gcp.endpoint`
    (the TPU API's); the other APIs' hosts follow from it (Google's, or the emulator's)."""

    default_endpoint: ClassVar[str] = TPU_ENDPOINT

    async def close_session(self) -> None:
        """Close the HTTP session only: the token source is the caller's (the daemon shares
        its own with its clouds), unlike `aclose`, which closes both."""
        if self._owns_session and self._session is not None and not self._session.closed:
            await self._session.close()

    def _host(self, api: str) -> str:
        if self.endpoint.rstrip("/") != TPU_ENDPOINT:
            return self.endpoint  # an emulator serves every API on its one port
        return GOOGLE[api]

    async def _get(self, call: str, url: str) -> JSON:
        return await self.request(call, "GET", url)

    # -- Cloud Resource Manager, Service Usage, IAM ------------------------------------------

    async def crm_project(self, project: str) -> JSON:
        return await self._get("projects.get", f"{self._host('crm')}/v1/projects/{project}")

    async def test_project_permissions(self, project: str, permissions: list[str]) -> list[str]:
        """The subset of `permissions` the caller holds on the project."""
        url = f"{self._host('crm')}/v1/projects/{project}:testIamPermissions"
        data = await self.request(
            "projects.testIamPermissions", "POST", url, body={"permissions": permissions}
        )
        return [p for p in data.get("permissions", []) if isinstance(p, str)]

    async def service(self, project: str, name: str) -> JSON:
        url = f"{self._host('serviceusage')}/v1/projects/{project}/services/{name}"
        return await self._get("services.get", url)

    async def service_account(self, email: str) -> JSON:
        url = f"{self._host('iam')}/v1/projects/-/serviceAccounts/{email}"
        return await self._get("serviceAccounts.get", url)

    async def test_account_permissions(self, email: str, permissions: list[str]) -> list[str]:
        url = f"{self._host('iam')}/v1/projects/-/serviceAccounts/{email}:testIamPermissions"
        data = await self.request(
            "serviceAccounts.testIamPermissions", "POST", url, body={"permissions": permissions}
        )
        return [p for p in data.get("permissions", []) if isinstance(p, str)]

    async def quota_infos(self, project: str, service: str) -> list[JSON]:
        """Every quota of `service` in the project, every page (pageSize at most 100)."""
        base = self._host("cloudquotas")
        url = f"{base}/v1/projects/{project}/locations/global/services/{service}/quotaInfos"

        def accept(page: JSON) -> list[JSON]:
            items = page.get("quotaInfos", [])
            return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

        return await self._pages("quotaInfos.list", url, {"pageSize": "100"}, accept)

    # -- TPU API -----------------------------------------------------------------------------

    def _tpu(self, version: str, path: str) -> str:
        return f"{self.endpoint}/{version}/{path}"

    async def accelerator_type(self, project: str, zone: str, name: str) -> JSON:
        url = self._tpu("v2", f"projects/{project}/locations/{zone}/acceleratorTypes/{name}")
        return await self._get("acceleratorTypes.get", url)

    async def runtime_version(self, project: str, zone: str, name: str) -> JSON:
        url = self._tpu("v2", f"projects/{project}/locations/{zone}/runtimeVersions/{name}")
        return await self._get("runtimeVersions.get", url)

    async def tpu_reservations(self, project: str, zone: str) -> list[JSON]:
        """v2alpha1 reservations.list: the TPU reservations of (project, zone), every page."""
        url = self._tpu("v2alpha1", f"projects/{project}/locations/{zone}/reservations")

        def accept(page: JSON) -> list[JSON]:
            items = page.get("reservations", [])
            return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

        return await self._pages("reservations.list", url, {}, accept)

    # -- Compute Engine ----------------------------------------------------------------------

    def _compute(self, path: str) -> str:
        return f"{self._host('compute')}/{compute_names.API_PATH}/{path}"

    async def compute_project(self, project: str) -> JSON:
        return await self._get("projects.get", self._compute(f"projects/{project}"))

    async def machine_type(self, project: str, zone: str, name: str) -> JSON:
        url = self._compute(f"projects/{project}/zones/{zone}/machineTypes/{name}")
        return await self._get("machineTypes.get", url)

    async def image(self, path: str) -> JSON:
        """`projects/P/global/images/family/F` (images.getFromFamily: the newest image of the
        family that is not deprecated) or `projects/P/global/images/I` (images.get)."""
        call = "images.getFromFamily" if "/images/family/" in path else "images.get"
        return await self._get(call, self._compute(path))

    async def resource(self, call: str, path: str) -> JSON:
        """networks.get, subnetworks.get, reservations.get, disks.get: by the resource's path
        (`projects/P/global/networks/N`, `projects/P/regions/R/subnetworks/S`,
        `projects/P/zones/Z/reservations/R`, `projects/P/zones/Z/disks/D`)."""
        return await self._get(call, self._compute(path))
