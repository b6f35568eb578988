"""`ComputeClient`: the Compute Engine v1 REST calls tpucared makes, over `RestClient`.

The request path (auth, the 401 refresh, retries, bounded phases, no redirects, the response
schema, classification into `ApiError`, counting in `request_counts`) is gcp/rest.py's,
shared with the TPU client; this module adds compute v1's URLs, calls and list shape.

- instances.insert / delete carry a `requestId` (a UUID), made once per call and sent again
  by every retry of it: Compute Engine ignores a request it already completed, so a retried
  create cannot make a second VM (research §2.4). A retry the server does not recognise
  still cannot make a twin: the name is ours, and a second insert of it is `alreadyExists`.
- Lists (`instances`, `operations`) follow `nextPageToken` to the end within the shared
  bounds, with `maxResults` (500 at most, the default) and a `filter`; a page must have the
  documented shape (`kind`, `id`, `items`, `nextPageToken`, `selfLink`, `warning`), and a
  page warning `UNREACHABLE` fails the whole list (TRANSIENT): a partial list would make
  present instances look vanished. An empty page may leave `items` out.
- Mutating calls answer a zonal `Operation` (operation.py), followed with
  zoneOperations.get (or `wait`, which returns within 2 minutes, DONE or not).
- A multi-host slice's calls (slices.py, shared.py): workload policies (regional
  resourcePolicies, followed with regionOperations.get), instance templates (global, with
  globalOperations.get) and zonal instanceGroupManagers (insert / get / delete / list,
  listManagedInstances); inserts and deletes carry a `requestId` as instances' do.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.compute import names
from tpucared.gcp.compute.operation import Operation
from tpucared.gcp.errors import ApiError, malformed_response
from tpucared.gcp.responses import PageMemo, check_page
from tpucared.gcp.rest import JSON, RestClient

# The most items compute v1 lists a page (maxResults: "0 to 500 inclusive", default 500).
MAX_RESULTS = 500
# What a compute v1 list page may carry besides its `items`.
PAGE_FIELDS = frozenset({"kind", "id", "nextPageToken", "selfLink", "warning"})
# How long a zoneOperations.wait request may be held: Google holds one "no more than the 2
# minutes" (research §2.6); half a minute more for the answer to arrive. The caller's own
# deadline (ANSWER_BY) may cut it sooner.
WAIT_HOLD_S = 150.0


class ComputeClient(RestClient):
    """Async client of compute.googleapis.com/compute/v1 (or the emulator at `endpoint`).
    Use as `async with ComputeClient(...) as client:` or call `aclose()`."""

    default_endpoint = names.DEFAULT_ENDPOINT

    def _url(self, path: str, verb: str | None = None) -> str:
        """The only place a URL is built: `{endpoint}/compute/v1/{path}[/{verb}]`."""
        return f"{self.endpoint}/{names.API_PATH}/{path}" + (f"/{verb}" if verb else "")

    async def _operation(
        self,
        call: str,
        method: str,
        url: str,
        project: str,
        zone: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        scope: str | None = None,
        hold: float | None = None,
    ) -> Operation:
        data = await self._call(call, method, url, params=params, body=body, hold=hold)
        try:
            return Operation.from_json(data, project, zone, scope=scope)
        except ValueError as exc:
            raise malformed_response(200, str(data), method=method, url=url, why=str(exc)) from exc

    async def _list(
        self,
        call: str,
        url: str,
        *,
        filter: str | None = None,
        max_results: int | None = MAX_RESULTS,
        fields: str | None = None,
        order_by: str | None = None,
        memo: PageMemo | None = None,
    ) -> list[JSON]:
        params: dict[str, str] = {}
        if filter is not None:
            params["filter"] = filter
        if max_results is not None:
            params["maxResults"] = str(max_results)
        if fields is not None:
            params["fields"] = fields
        if order_by is not None:
            params["orderBy"] = order_by

        def accept(page: JSON) -> list[JSON]:
            check_page(page, "items", method="GET", url=url, fields=PAGE_FIELDS)
            warning = page.get("warning")
            if warning is not None and not isinstance(warning, Mapping):
                raise malformed_response(200, str(warning), method="GET", url=url, why="warning")
            if isinstance(warning, Mapping) and warning.get("code") == "UNREACHABLE":
                raise ApiError.of(
                    ErrorKind.TRANSIENT,
                    f"the list is incomplete: {warning.get('message') or 'unreachable'}",
                    method="GET",
                    url=url,
                )
            items: list[JSON] = page.get("items", [])
            return items

        return await self._pages(call, url, params, accept, memo=memo)

    # -- instances ------------------------------------------------------------------------------

    async def insert_instance(
        self, project: str, zone: str, body: Mapping[str, Any], *, request_id: str | None = None
    ) -> Operation:
        """Start creating an instance (bodies.py's `instance_body`); its capacity errors come
        in the returned Operation (or, some say, at once: both are classified alike).
        `request_id`: a UUID, made here unless given; every retry sends the same one."""
        url = self._url(f"{names.zone_path(project, zone)}/instances")
        params = {"requestId": request_id or str(uuid.uuid4())}
        return await self._operation(
            "instances.insert", "POST", url, project, zone, params=params, body=body
        )

    async def list_instances(
        self,
        project: str,
        zone: str,
        *,
        filter: str | None = None,
        max_results: int | None = MAX_RESULTS,
        fields: str | None = None,
        memo: PageMemo | None = None,
    ) -> list[JSON]:
        """Every instance of the zone matching `filter` (e.g. `labels.tpucared-owner=o`),
        across all pages. `fields`: a partial response; a selection must keep
        `nextPageToken` and `warning`, which the paging relies on. `memo`: this list's
        pages as last read (responses.py); its items must not be changed."""
        url = self._url(f"{names.zone_path(project, zone)}/instances")
        return await self._list(
            "instances.list", url, filter=filter, max_results=max_results, fields=fields, memo=memo
        )

    async def get_instance(self, project: str, zone: str, name: str) -> JSON:
        url = self._url(names.instance_path(project, zone, name))
        return await self._call("instances.get", "GET", url)

    async def delete_instance(
        self, project: str, zone: str, name: str, *, request_id: str | None = None
    ) -> Operation:
        """Start deleting an instance. NOT_FOUND means it is already gone (callers treat it
        as done)."""
        url = self._url(names.instance_path(project, zone, name))
        params = {"requestId": request_id or str(uuid.uuid4())}
        return await self._operation(
            "instances.delete", "DELETE", url, project, zone, params=params
        )

    async def get_guest_attributes(
        self, project: str, zone: str, name: str, query_path: str = "hostkeys/"
    ) -> JSON:
        """The instance's guest attributes under `query_path` (`{queryValue: {items:
        [{namespace, key, value}]}}`); NOT_FOUND until the guest publishes some."""
        url = self._url(names.instance_path(project, zone, name), "getGuestAttributes")
        return await self._call(
            "instances.getGuestAttributes", "GET", url, params={"queryPath": query_path}
        )

    # -- zone operations ------------------------------------------------------------------------

    async def get_operation(self, project: str, zone: str, name: str) -> Operation:
        url = self._url(names.operation_path(project, zone, name))
        return await self._operation("zoneOperations.get", "GET", url, project, zone)

    async def wait_operation(self, project: str, zone: str, name: str) -> Operation:
        """zoneOperations.wait: returns when the operation is DONE or within about 2 minutes,
        DONE or not, possibly at once (research §2.6; callers loop). Its request may be held
        `WAIT_HOLD_S`, past the client's own read bound (30 s), which would cut it."""
        url = self._url(names.operation_path(project, zone, name), "wait")
        return await self._operation(
            "zoneOperations.wait", "POST", url, project, zone, hold=WAIT_HOLD_S
        )

    async def list_operations(
        self,
        project: str,
        zone: str,
        *,
        filter: str | None = None,
        max_results: int | None = MAX_RESULTS,
    ) -> list[Operation]:
        """The zone's operations matching `filter`, e.g.
        `operationType="compute.instances.preempted"`, across all pages."""
        url = self._url(f"{names.zone_path(project, zone)}/operations")
        items = await self._list("zoneOperations.list", url, filter=filter, max_results=max_results)
        try:
            return [Operation.from_json(item, project, zone) for item in items]
        except ValueError as exc:
            raise malformed_response(200, str(exc), method="GET", url=url, why=str(exc)) from exc

    # -- workload policies (regional), instance templates (global) --------------------------------

    async def insert_policy(
        self, project: str, region: str, body: Mapping[str, Any], *, request_id: str | None = None
    ) -> Operation:
        scope = names.region_path(project, region)
        params = {"requestId": request_id or str(uuid.uuid4())}
        return await self._operation(
            "resourcePolicies.insert",
            "POST",
            self._url(f"{scope}/resourcePolicies"),
            project,
            region,
            params=params,
            body=body,
            scope=scope,
        )

    async def get_policy(self, project: str, region: str, name: str) -> JSON:
        url = self._url(names.policy_path(project, region, name))
        return await self._call("resourcePolicies.get", "GET", url)

    async def delete_policy(self, project: str, region: str, name: str) -> Operation:
        scope = names.region_path(project, region)
        params = {"requestId": str(uuid.uuid4())}
        return await self._operation(
            "resourcePolicies.delete",
            "DELETE",
            self._url(names.policy_path(project, region, name)),
            project,
            region,
            params=params,
            scope=scope,
        )

    async def list_policies(self, project: str, region: str) -> list[JSON]:
        url = self._url(f"{names.region_path(project, region)}/resourcePolicies")
        return await self._list("resourcePolicies.list", url)

    async def insert_template(
        self, project: str, body: Mapping[str, Any], *, request_id: str | None = None
    ) -> Operation:
        scope = names.global_path(project)
        params = {"requestId": request_id or str(uuid.uuid4())}
        return await self._operation(
            "instanceTemplates.insert",
            "POST",
            self._url(f"{scope}/instanceTemplates"),
            project,
            "global",
            params=params,
            body=body,
            scope=scope,
        )

    async def get_template(self, project: str, name: str) -> JSON:
        url = self._url(names.template_path(project, name))
        return await self._call("instanceTemplates.get", "GET", url)

    async def delete_template(self, project: str, name: str) -> Operation:
        scope = names.global_path(project)
        params = {"requestId": str(uuid.uuid4())}
        return await self._operation(
            "instanceTemplates.delete",
            "DELETE",
            self._url(names.template_path(project, name)),
            project,
            "global",
            params=params,
            scope=scope,
        )

    async def list_templates(
        self, project: str, *, filter: str | None = None, fields: str | None = None
    ) -> list[JSON]:
        url = self._url(f"{names.global_path(project)}/instanceTemplates")
        return await self._list("instanceTemplates.list", url, filter=filter, fields=fields)

    async def get_scoped_operation(self, scope: str, name: str) -> Operation:
        """regionOperations.get (`scope` `projects/P/regions/R`) or globalOperations.get
        (`projects/P/global`)."""
        call = "globalOperations.get" if scope.endswith("/global") else "regionOperations.get"
        project = scope.split("/")[1]
        url = self._url(f"{scope}/operations/{names.short_name(name)}")
        return await self._operation(call, "GET", url, project, "", scope=scope)

    # -- zonal managed instance groups ------------------------------------------------------------

    async def insert_mig(
        self, project: str, zone: str, body: Mapping[str, Any], *, request_id: str | None = None
    ) -> Operation:
        url = self._url(f"{names.zone_path(project, zone)}/instanceGroupManagers")
        params = {"requestId": request_id or str(uuid.uuid4())}
        return await self._operation(
            "instanceGroupManagers.insert", "POST", url, project, zone, params=params, body=body
        )

    async def get_mig(self, project: str, zone: str, name: str) -> JSON:
        url = self._url(names.mig_path(project, zone, name))
        return await self._call("instanceGroupManagers.get", "GET", url)

    async def delete_mig(
        self, project: str, zone: str, name: str, *, request_id: str | None = None
    ) -> Operation:
        """Start deleting a MIG and its members. NOT_FOUND: gone already."""
        url = self._url(names.mig_path(project, zone, name))
        params = {"requestId": request_id or str(uuid.uuid4())}
        return await self._operation(
            "instanceGroupManagers.delete", "DELETE", url, project, zone, params=params
        )

    async def perform_maintenance(self, project: str, zone: str, name: str) -> Operation:
        """instances.performMaintenance (compute/docs/reference/rest/v1/instances/
        performMaintenance: no body): start the instance's pending maintenance now."""
        url = self._url(names.instance_path(project, zone, name), "performMaintenance")
        params = {"requestId": str(uuid.uuid4())}
        return await self._operation(
            "instances.performMaintenance", "POST", url, project, zone, params=params
        )

    async def list_migs(
        self, project: str, zone: str, *, fields: str | None = None, memo: PageMemo | None = None
    ) -> list[JSON]:
        url = self._url(f"{names.zone_path(project, zone)}/instanceGroupManagers")
        return await self._list("instanceGroupManagers.list", url, fields=fields, memo=memo)

    async def list_managed_instances(self, project: str, zone: str, name: str) -> list[JSON]:
        """listManagedInstances: each member's `instance`, `instanceStatus`, `currentAction`
        and `lastAttempt.errors` (where an INDIVIDUAL MIG's stockout shows). One page: a
        slice's members are few (at most 64 hosts), and Google answers PAGELESS by default."""
        url = self._url(names.mig_path(project, zone, name), "listManagedInstances")
        data = await self._call("instanceGroupManagers.listManagedInstances", "POST", url)
        items = data.get("managedInstances", [])
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            raise malformed_response(200, str(items), method="POST", url=url, why="members")
        return items
