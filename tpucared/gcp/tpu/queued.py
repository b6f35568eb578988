"""The queuedResources.* calls of `TpuClient` (client.py), as a mixin it inherits.

A queued resource asks for capacity and waits for it; the service then creates its node(s).
These calls go through the client's one request path (`_call` / `_operation` / `_list`, see
client.py), so they are retried, classified and counted like every other call. The request
body is bodies.py's `queued_resource_body`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, overload

from tpucared.gcp.tpu import bodies, names
from tpucared.gcp.tpu.operation import Operation

JSON = dict[str, Any]


class QueuedResourceCalls:
    """queuedResources.create/get/list/delete/reset over the client's request path."""

    if TYPE_CHECKING:  # provided by TpuClient (client.py) and its RestClient

        def _url(self, resource: str, verb: str | None = None) -> str: ...

        async def _call(
            self,
            call: str,
            method: str,
            url: str,
            *,
            params: Mapping[str, str] | None = None,
            body: Mapping[str, Any] | None = None,
            read: Callable[..., JSON] = ...,
            hold: float | None = None,
        ) -> JSON: ...

        async def _operation(
            self,
            call: str,
            method: str,
            url: str,
            *,
            params: Mapping[str, str] | None = None,
            body: Mapping[str, Any] | None = None,
        ) -> Operation: ...

        async def _list(
            self,
            call: str,
            parent: str,
            collection: str,
            *,
            page_size: int | None,
            fields: str | None = None,
        ) -> list[JSON]: ...

    async def create_queued_resource(
        self,
        project: str,
        zone: str,
        qr_id: str,
        *,
        node_id: str | None = None,
        shape: bodies.NodeShape,
        reservation_name: str | None = None,
        valid_until_seconds: float | None = None,
        multislice_count: int | None = None,
        node_id_prefix: str | None = None,
    ) -> Operation:
        """Queue one node of `shape` (`node_id`), or a multislice of `multislice_count` (> 1)
        nodes of `shape` named `{node_id_prefix}-0` .. (the prefix defaults to `qr_id`); the
        capacity tier of `shape` becomes the queued resource's. Exactly one of `node_id` and
        `multislice_count` must be given, `node_id_prefix` only with `multislice_count`:
        anything else is a ValueError, raised before any request."""
        if shape.capacity is None:
            raise ValueError("a queued resource needs a capacity tier (spot, on-demand, ...)")
        body = bodies.queued_resource_body(
            project,
            zone,
            node_id=node_id,
            node=bodies.node_body(shape.for_queue()),
            capacity=shape.capacity,
            reservation_name=reservation_name,
            valid_until_seconds=valid_until_seconds,
            multislice_count=multislice_count,
            node_id_prefix=node_id_prefix,
        )
        url = self._url(f"{names.location(project, zone)}/queuedResources")
        return await self._operation(
            "queuedResources.create", "POST", url, params={"queuedResourceId": qr_id}, body=body
        )

    @overload
    async def get_queued_resource(self, name: str, /) -> JSON: ...
    @overload
    async def get_queued_resource(self, project: str, zone: str, qr_id: str, /) -> JSON: ...
    async def get_queued_resource(self, *parts: str) -> JSON:
        name = names.resolve(parts, names.queued_resource_name)
        return await self._call("queuedResources.get", "GET", self._url(name))

    async def list_queued_resources(
        self, project: str, zone: str, *, page_size: int | None = None
    ) -> list[JSON]:
        return await self._list(
            "queuedResources.list",
            names.location(project, zone),
            "queuedResources",
            page_size=page_size,
        )

    @overload
    async def delete_queued_resource(self, name: str, /, *, force: bool = False) -> Operation: ...
    @overload
    async def delete_queued_resource(
        self, project: str, zone: str, qr_id: str, /, *, force: bool = False
    ) -> Operation: ...
    async def delete_queued_resource(self, *parts: str, force: bool = False) -> Operation:
        """Delete a queued resource; `force` deletes its nodes first (else they must be gone)."""
        name = names.resolve(parts, names.queued_resource_name)
        params = {"force": "true"} if force else None
        return await self._operation(
            "queuedResources.delete", "DELETE", self._url(name), params=params
        )

    async def reset_queued_resource(self, name: str) -> Operation:
        """Put a FAILED/SUSPENDED queued resource back in the queue."""
        return await self._operation(
            "queuedResources.reset", "POST", self._url(name, "reset"), body={}
        )
