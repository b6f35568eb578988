"""The TPU v2 REST surface: URL routing, query parameters and JSON bodies, onto EmulatorState.

Paths are exactly those of tpu.googleapis.com (cloud_tpu.proto HTTP bindings and tpu_v2.yaml),
including custom methods after a colon (`nodes/n:getGuestAttributes`). A single catch-all
aiohttp route hands `/v2/...` here, because aiohttp's `{var}` segments would swallow the
`:verb` suffix. Like Google's front end, query parameters may be camelCase or snake_case,
system parameters (`$alt`, `alt`, `key`, ...) are accepted and ignored except `fields`, which
the server applies to the response (fields.py), and an unknown parameter is a 400. Handlers
return JSON-ready dicts; errors are raised as ApiError and turned into the Google envelope by
the middleware (middleware.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tpucared_emulator import errors, official_tpu
from tpucared_emulator.paging import Page, decode_token, encode_token, page_size
from tpucared_emulator.projects import project_number
from tpucared_emulator.schema import camel
from tpucared_emulator.state import EmulatorState

JsonDict = dict[str, Any]
Handler = Callable[[web.Request, "re.Match[str]", dict[str, str]], Awaitable[JsonDict]]

# Standard system parameters every Google API accepts (https://cloud.google.com/apis/docs/system-parameters).
SYSTEM_PARAMETERS = frozenset(
    {
        "$alt", "alt", "$.xgafv", "key", "fields", "prettyPrint", "quotaUser", "access_token",
        "oauth_token", "callback", "upload_protocol", "uploadType", "userIp", "$callback",
        "$fields", "$prettyPrint", "$userIp", "$quotaUser",
    }
)  # fmt: skip

_ID = r"([^/:]+)"
_PARENT = rf"projects/{_ID}/locations/{_ID}"
LIST_PARAMS = frozenset({"pageSize", "pageToken"})


class Route:
    def __init__(self, method: str, pattern: str, handler: Handler, params: frozenset[str]):
        self.method = method
        self.regex = re.compile(pattern)
        self.handler = handler
        self.params = params


class V2Api:
    def __init__(self, state: EmulatorState) -> None:
        self.state = state
        official_tpu.require()  # refuse to serve without Google's types, in one line that says why
        self._creates_this_minute: dict[tuple[str, int], int] = {}  # (project, minute) -> n
        list_extra = LIST_PARAMS | {"filter", "orderBy"}
        self.routes = [
            Route("GET", rf"projects/{_ID}/locations", self.list_locations,
                  LIST_PARAMS | {"filter", "extraLocationTypes"}),
            Route("GET", _PARENT, self.get_location, frozenset()),
            Route("POST", rf"{_PARENT}:generateServiceIdentity", self.service_identity,
                  frozenset()),
            Route("GET", rf"{_PARENT}/acceleratorTypes", self.list_accelerator_types, list_extra),
            Route("GET", rf"{_PARENT}/acceleratorTypes/{_ID}", self.get_accelerator_type,
                  frozenset()),
            Route("GET", rf"{_PARENT}/runtimeVersions", self.list_runtime_versions, list_extra),
            Route("GET", rf"{_PARENT}/runtimeVersions/{_ID}", self.get_runtime_version,
                  frozenset()),
            Route("GET", rf"{_PARENT}/nodes", self.list_nodes, LIST_PARAMS),
            Route("POST", rf"{_PARENT}/nodes", self.create_node, frozenset({"nodeId"})),
            Route("GET", rf"{_PARENT}/nodes/{_ID}", self.get_node, frozenset()),
            Route("DELETE", rf"{_PARENT}/nodes/{_ID}", self.delete_node, frozenset()),
            Route("PATCH", rf"{_PARENT}/nodes/{_ID}", self.update_node,
                  frozenset({"updateMask"})),
            Route("POST", rf"{_PARENT}/nodes/{_ID}:getGuestAttributes", self.guest_attributes,
                  frozenset()),
            Route("POST", rf"{_PARENT}/nodes/{_ID}:start", self.start_node, frozenset()),
            Route("POST", rf"{_PARENT}/nodes/{_ID}:stop", self.stop_node, frozenset()),
            Route("GET", rf"{_PARENT}/operations", self.list_operations,
                  LIST_PARAMS | {"filter"}),
            Route("GET", rf"{_PARENT}/operations/{_ID}", self.get_operation, frozenset()),
            Route("DELETE", rf"{_PARENT}/operations/{_ID}", self.delete_operation, frozenset()),
            Route("POST", rf"{_PARENT}/operations/{_ID}:cancel", self.cancel_operation,
                  frozenset()),
            Route("GET", rf"{_PARENT}/queuedResources", self.list_queued_resources, LIST_PARAMS),
            Route("POST", rf"{_PARENT}/queuedResources", self.create_queued_resource,
                  frozenset({"queuedResourceId", "requestId"})),
            Route("GET", rf"{_PARENT}/queuedResources/{_ID}", self.get_queued_resource,
                  frozenset()),
            Route("DELETE", rf"{_PARENT}/queuedResources/{_ID}", self.delete_queued_resource,
                  frozenset({"force", "requestId"})),
            Route("POST", rf"{_PARENT}/queuedResources/{_ID}:reset", self.reset_queued_resource,
                  frozenset()),
        ]  # fmt: skip

    async def dispatch(self, request: web.Request) -> JsonDict:
        tail = request.path.removeprefix("/v2/")
        for route in self.routes:
            match = route.regex.fullmatch(tail)
            if match and route.method == request.method:
                return await route.handler(request, match, query_of(request, route.params))
        raise errors.ApiError(
            "NOT_FOUND", f"The requested URL {request.path} was not found on this server."
        )

    # -----------------------------------------------------------------------------------------
    # Locations, accelerator types, runtime versions.

    async def list_locations(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        items = self.state.locations(m[1])
        return _static_page("locations", items, q, f"projects/{m[1]}/locations")

    async def get_location(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return self.state.location(m[1], m[2])

    async def service_identity(
        self, r: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        await _body(r, "GenerateServiceIdentityRequest", "")
        self.state.check_zone(m[2])
        # The TPU v2 service agent: service-PROJECT_NUMBER@gcp-sa-tpu.iam.gserviceaccount.com
        # (Google's service agents page, docs.cloud.google.com/iam/docs/service-agents).
        email = f"service-{project_number(m[1])}@gcp-sa-tpu.iam.gserviceaccount.com"
        return {"identity": {"email": email}}

    async def list_accelerator_types(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        items = self.state.accelerator_types(m[1], m[2])
        return _static_page("acceleratorTypes", items, q, m[0])

    async def get_accelerator_type(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        return self.state.accelerator_type(m[1], m[2], m[3])

    async def list_runtime_versions(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        items = self.state.runtime_versions(m[1], m[2])
        return _static_page("runtimeVersions", items, q, m[0])

    async def get_runtime_version(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        return self.state.runtime_version(m[1], m[2], m[3])

    # -----------------------------------------------------------------------------------------
    # Nodes.

    async def list_nodes(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        page = self.state.list_nodes(m[1], m[2], q.get("pageSize"), q.get("pageToken"))
        return _page("nodes", page)

    async def create_node(self, r: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        body = await _body(r, "Node", "node")
        self._count_create(m[1])
        return self.state.create_node(m[1], m[2], q.get("nodeId"), body).to_json()

    def _count_create(self, project: str) -> None:
        """The per-minute nodes.create quota (`create_requests_per_minute`), counted per
        project and minute of the emulator's clock, refused ones not counted."""
        limit = self.state.options.create_requests_per_minute
        if limit is None:
            return
        key = (project, int(self.state.now() // 60))
        used = self._creates_this_minute.get(key, 0)
        if used >= limit:
            raise errors.create_rate_exceeded(limit, project)
        # Only this minute's counts are kept.
        self._creates_this_minute = {
            k: v for k, v in self._creates_this_minute.items() if k[1] == key[1]
        }
        self._creates_this_minute[key] = used + 1

    async def get_node(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return self.state.get_node(m[1], m[2], m[3]).to_json()

    async def delete_node(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return self.state.delete_node(m[1], m[2], m[3]).to_json()

    async def update_node(self, r: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        body = await _body(r, "Node", "node")
        op = self.state.update_node(m[1], m[2], m[3], body, q.get("updateMask"))
        return op.to_json()

    async def guest_attributes(
        self, r: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        body = await _body(r, "GetGuestAttributesRequest", "")
        attributes = self.state.guest_attributes(m[1], m[2], m[3], body)
        return {"guestAttributes": attributes} if attributes else {}

    async def start_node(self, r: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        await _body(r, "StartNodeRequest", "")
        return self.state.start_node(m[1], m[2], m[3]).to_json()

    async def stop_node(self, r: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        await _body(r, "StopNodeRequest", "")
        return self.state.stop_node(m[1], m[2], m[3]).to_json()

    # -----------------------------------------------------------------------------------------
    # Operations.

    async def list_operations(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        page = self.state.list_operations(m[1], m[2], q.get("pageSize"), q.get("pageToken"))
        return _page("operations", page)

    async def get_operation(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return self.state.get_operation(m[0]).to_json()

    async def delete_operation(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        self.state.get_operation(m[0])
        return {}  # deleting only forgets the record; nothing the emulator needs to do

    async def cancel_operation(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        self.state.get_operation(m[0].rsplit(":", 1)[0])
        return {}  # best effort, as the API documents: the operation runs to completion

    # -----------------------------------------------------------------------------------------
    # Queued resources.

    async def list_queued_resources(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        page = self.state.queued.list_page(m[1], m[2], q.get("pageSize"), q.get("pageToken"))
        return _page("queuedResources", page)

    async def create_queued_resource(
        self, r: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        body = await _body(r, "QueuedResource", "queued_resource")
        op = self.state.queued.create(m[1], m[2], q.get("queuedResourceId"), body)
        return op.to_json()

    async def get_queued_resource(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        return self.state.queued.get(m[1], m[2], m[3]).to_json()

    async def delete_queued_resource(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        force = _bool(q.get("force"), "force")
        return self.state.queued.delete(m[1], m[2], m[3], force).to_json()

    async def reset_queued_resource(
        self, r: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        await _body(r, "ResetQueuedResourceRequest", "")
        return self.state.queued.reset(m[1], m[2], m[3]).to_json()


def query_of(request: web.Request, allowed: frozenset[str]) -> dict[str, str]:
    """Query parameters by camelCase name; 400 for one the method does not take (system
    parameters aside), in Google's words. Also the v2alpha1 methods' (api_v2alpha1.py)."""
    out: dict[str, str] = {}
    for raw_name, value in request.query.items():
        if raw_name in SYSTEM_PARAMETERS:
            continue
        name = camel(raw_name)
        if name not in allowed:
            raise errors.invalid_argument(
                f'Invalid JSON payload received. Unknown name "{raw_name}": Cannot bind query '
                f"parameter. Field '{raw_name}' could not be found in request message."
            )
        out[name] = value
    return out


async def _body(request: web.Request, schema: str, path: str) -> object:
    """The JSON body, checked first as the discovery document's `schema` with Google's own
    types (official_tpu.py); `path` is where its errors say it is."""
    body = await json_payload(request)
    official_tpu.check(schema, body, path)
    return body


async def json_payload(request: web.Request) -> object:
    """The request's JSON body ({} when empty); 400 in Google's words when it is not JSON.
    Also the v2alpha1 methods' (api_v2alpha1.py)."""
    text = await request.text()
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError as exc:
        raise errors.invalid_argument(
            f"Invalid JSON payload received. {exc.args[0] if exc.args else exc}"
        ) from None


def _bool(raw: str | None, name: str) -> bool:
    if raw is None or raw == "":
        return False
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise errors.invalid_argument(f"Invalid value at '{name}' (TYPE_BOOL), \"{raw}\"", name)


def _page(key: str, page: Page) -> JsonDict:
    # proto3 JSON omits empty repeated fields and empty strings: an empty zone lists as {}.
    out: JsonDict = {}
    if page.items:
        out[key] = page.items
    if page.next_page_token:
        out["nextPageToken"] = page.next_page_token
    return out


def _static_page(key: str, items: list[JsonDict], q: dict[str, str], scope: str) -> JsonDict:
    """Pages over a small fixed catalog: everything unless the client asks for less."""
    size = page_size(q.get("pageSize"), len(items) or 1, max(len(items), 1))
    last = decode_token(q.get("pageToken"), scope) or "0"
    start = int(last) if last.isdigit() else 0
    chunk = items[start : start + size]
    more = start + size < len(items)
    return _page(key, Page(chunk, encode_token(scope, str(start + size)) if more else None))
