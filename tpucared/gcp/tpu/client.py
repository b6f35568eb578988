"""`TpuClient`: the TPU v2 REST calls tpucared makes, over one aiohttp session.

The request path (auth, the 401 refresh, retries, bounded phases, no redirects, the response
schema, classification into `ApiError`, counting in `request_counts`) is `RestClient`'s
(gcp/rest.py), which the Compute Engine client shares; this module adds the TPU API's URLs,
calls and list shape.

Methods return parsed JSON dicts (the API's camelCase shapes) or `Operation`s; turning them
into domain types is convert.py's job. The queuedResources.* calls live in queued.py, a mixin
over this request path. Every list follows `nextPageToken` to the end, within
`MAX_LIST_PAGES` and `list_deadline` (a list that does not end is MALFORMED), and a page that
reports unreachable locations fails the whole list (TRANSIENT): a partial list would make
present nodes look vanished.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, overload

import structlog

from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.errors import ApiError, OperationTimeout, malformed_response
from tpucared.gcp.responses import PageMemo, check_page
from tpucared.gcp.rest import (
    JSON,
    MAX_LIST_PAGES,
    USER_AGENT,
    RequestHook,
    RestClient,
)
from tpucared.gcp.retry import Sleep
from tpucared.gcp.tpu import bodies, names
from tpucared.gcp.tpu.operation import Operation
from tpucared.gcp.tpu.queued import QueuedResourceCalls

__all__ = ["DEFAULT_ENDPOINT", "MAX_LIST_PAGES", "USER_AGENT", "RequestHook", "TpuClient"]

DEFAULT_ENDPOINT = "https://tpu.googleapis.com"

log = structlog.get_logger(__name__)


class TpuClient(QueuedResourceCalls, RestClient):
    """Async client of tpu.googleapis.com/v2 (or the emulator at `endpoint`): a `RestClient`
    (gcp/rest.py) with the TPU API's calls. Use as `async with TpuClient(...) as client:`
    or call `aclose()`."""

    default_endpoint = DEFAULT_ENDPOINT

    # -- URLs -----------------------------------------------------------------------------------

    def _url(self, resource: str, verb: str | None = None) -> str:
        """The only place a URL is built: `{endpoint}/v2/{resource}[:verb]`."""
        return f"{self.endpoint}/{names.API_VERSION}/{resource}" + (f":{verb}" if verb else "")

    async def _operation(
        self,
        call: str,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Operation:
        data = await self._call(call, method, url, params=params, body=body)
        try:
            return Operation.from_json(data)
        except ValueError as exc:
            raise malformed_response(200, str(data), method=method, url=url, why=str(exc)) from exc

    async def _list(
        self,
        call: str,
        parent: str,
        collection: str,
        *,
        page_size: int | None,
        fields: str | None = None,
        memo: PageMemo | None = None,
    ) -> list[JSON]:
        url = self._url(f"{parent}/{collection}")
        params: dict[str, str] = {}
        if page_size is not None:
            params["pageSize"] = str(page_size)
        if fields is not None:
            params["fields"] = fields

        def accept(page: JSON) -> list[JSON]:
            check_page(page, collection, method="GET", url=url)
            unreachable = page.get("unreachable")
            if unreachable:
                raise ApiError.of(
                    ErrorKind.TRANSIENT,
                    f"the list is incomplete: unreachable {unreachable}",
                    method="GET",
                    url=url,
                )
            items: list[JSON] = page.get(collection, [])
            return items

        return await self._pages(call, url, params, accept, memo=memo)

    # -- nodes ----------------------------------------------------------------------------------

    async def list_nodes(
        self,
        project: str,
        zone: str,
        *,
        page_size: int | None = None,
        fields: str | None = None,
        memo: PageMemo | None = None,
    ) -> list[JSON]:
        """Every node of the zone, across all pages. `fields`: a partial response (the system
        parameter), e.g. "nextPageToken,unreachable,nodes(name,state)"; a selection must keep
        `nextPageToken` and `unreachable`, which the paging relies on. `memo`: this list's
        pages as last read (responses.py); the nodes of a page unchanged since are the very
        objects returned then, and must not be changed."""
        return await self._list(
            "nodes.list",
            names.location(project, zone),
            "nodes",
            page_size=page_size,
            fields=fields,
            memo=memo,
        )

    @overload
    async def get_node(self, name: str, /) -> JSON: ...
    @overload
    async def get_node(self, project: str, zone: str, node_id: str, /) -> JSON: ...
    async def get_node(self, *parts: str) -> JSON:
        name = names.resolve(parts, names.node_name)
        return await self._call("nodes.get", "GET", self._url(name))

    async def create_node(
        self, project: str, zone: str, node_id: str, shape: bodies.NodeShape
    ) -> Operation:
        """Start creating a node; wait on the returned Operation for capacity errors."""
        if shape.capacity is None:
            raise ValueError("nodes.create needs a capacity tier (spot, on-demand, ...)")
        url = self._url(f"{names.location(project, zone)}/nodes")
        return await self._operation(
            "nodes.create", "POST", url, params={"nodeId": node_id}, body=bodies.node_body(shape)
        )

    @overload
    async def delete_node(self, name: str, /) -> Operation: ...
    @overload
    async def delete_node(self, project: str, zone: str, node_id: str, /) -> Operation: ...
    async def delete_node(self, *parts: str) -> Operation:
        """Start deleting a node. NOT_FOUND means it is already gone (callers treat as done)."""
        name = names.resolve(parts, names.node_name)
        return await self._operation("nodes.delete", "DELETE", self._url(name))

    async def perform_maintenance(self, project: str, zone: str, node_id: str) -> Operation:
        """v2alpha1 `nodes.performMaintenance` (only v2alpha1 has it: googleapis
        google/cloud/tpu/v2alpha1/cloud_tpu.proto, `body: "*"` of a request whose only field
        is the name in the URL): start the node's pending maintenance now. The operation it
        answers is the zone's, read with v2 `operations.get`."""
        name = names.node_name(project, zone, node_id)
        url = f"{self.endpoint}/v2alpha1/{name}:performMaintenance"
        return await self._operation("nodes.performMaintenance", "POST", url, body={})

    async def patch_node(
        self, name: str, body: Mapping[str, Any], update_mask: Sequence[str]
    ) -> Operation:
        """Update the fields named in `update_mask` (e.g. ["metadata"] to add ssh-keys)."""
        if not update_mask:
            raise ValueError("update_mask must name at least one field")
        return await self._operation(
            "nodes.patch",
            "PATCH",
            self._url(name),
            params={"updateMask": ",".join(update_mask)},
            body=body,
        )

    async def get_guest_attributes(
        self,
        name: str,
        query_path: str | None = None,
        worker_ids: Sequence[str | int] | None = None,
    ) -> JSON:
        """Guest attributes of the node's workers, e.g. query_path="hostkeys/" for host keys."""
        body: JSON = {}
        if query_path is not None:
            body["queryPath"] = query_path
        if worker_ids:
            body["workerIds"] = [str(w) for w in worker_ids]
        return await self._call(
            "nodes.getGuestAttributes", "POST", self._url(name, "getGuestAttributes"), body=body
        )

    # -- operations -----------------------------------------------------------------------------

    async def get_operation(self, name: str) -> Operation:
        return await self._operation("operations.get", "GET", self._url(name))

    async def wait_operation(
        self,
        operation: Operation | str,
        *,
        poll_interval: float = 1.0,
        # Not asyncio.timeout: that would cut a poll mid-request, and the deadline must
        # follow the injected clock in tests.
        timeout: float = 900.0,  # noqa: ASYNC109
        sleep: Sleep | None = None,
    ) -> Operation:
        """Poll until done. Raises the operation's classified ApiError if it failed (e.g.
        CAPACITY for a stockout), or OperationTimeout if still running after `timeout` s."""
        pause = sleep if sleep is not None else self._sleep
        current = operation if isinstance(operation, Operation) else None
        if current is None:
            current = await self.get_operation(str(operation))
        deadline = self._clock() + timeout
        while not current.done:
            if self._clock() >= deadline:
                raise OperationTimeout(f"still running after {timeout:g}s", operation=current.name)
            await pause(poll_interval)
            current = await self.get_operation(current.name)
        error = current.exception()
        if error is not None:
            raise error
        return current

    # -- catalogue ------------------------------------------------------------------------------

    async def list_accelerator_types(
        self, project: str, zone: str, *, page_size: int | None = None
    ) -> list[JSON]:
        return await self._list(
            "acceleratorTypes.list",
            names.location(project, zone),
            "acceleratorTypes",
            page_size=page_size,
        )

    async def list_runtime_versions(
        self, project: str, zone: str, *, page_size: int | None = None
    ) -> list[JSON]:
        return await self._list(
            "runtimeVersions.list",
            names.location(project, zone),
            "runtimeVersions",
            page_size=page_size,
        )
