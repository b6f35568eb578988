"""The compute v1 REST surface: URL routing, query parameters and JSON bodies, onto the requests.

Paths are exactly those of compute.googleapis.com under `/compute/v1/` (as google-cloud-compute's
REST transport and the daemon's client send them, research section 8):

    POST   projects/{p}/zones/{z}/instances?requestId=          instances.insert
    GET    projects/{p}/zones/{z}/instances[?filter&maxResults&pageToken]   instances.list
    GET    projects/{p}/zones/{z}/instances/{name}              instances.get
    DELETE projects/{p}/zones/{z}/instances/{name}?requestId=   instances.delete
    GET    projects/{p}/zones/{z}/instances/{name}/getGuestAttributes?queryPath=|variableKey=
    POST   projects/{p}/zones/{z}/instances/{name}/performMaintenance?requestId=   (body empty)
    POST   .../instances/{name}/simulateMaintenanceEvent?requestId=&withExtendedNotifications=
    GET    projects/{p}/zones/{z}/operations[?filter&maxResults&pageToken]  zoneOperations.list
    GET    projects/{p}/zones/{z}/operations/{op}               zoneOperations.get
    POST   projects/{p}/zones/{z}/operations/{op}/wait          zoneOperations.wait
    GET    projects/{p}/zones/{z}/machineTypes/{mt}             machineTypes.get
    GET    projects/{p}/{regions/r|global}/operations/{op}      region/globalOperations.get
    POST   projects/{p}/{regions/r|global}/operations/{op}/wait region/globalOperations.wait
    POST   projects/{p}/regions/{r}/resourcePolicies?requestId= resourcePolicies.insert
    GET    projects/{p}/regions/{r}/resourcePolicies[/{name}]   resourcePolicies.list / get
    DELETE projects/{p}/regions/{r}/resourcePolicies/{name}     resourcePolicies.delete
    POST   projects/{p}/{global|regions/r}/instanceTemplates    instanceTemplates.insert
    GET    projects/{p}/{global|regions/r}/instanceTemplates[/{name}]   .list / .get
    DELETE projects/{p}/{global|regions/r}/instanceTemplates/{name}     .delete
    POST   projects/{p}/{zones/z|regions/r}/instanceGroupManagers?requestId=   insert
    GET    projects/{p}/{zones/z|regions/r}/instanceGroupManagers[/{m}]        list / get
    DELETE projects/{p}/{zones/z|regions/r}/instanceGroupManagers/{m}          delete
    POST   .../instanceGroupManagers/{m}/listManagedInstances                 (PAGELESS)
    POST   .../instanceGroupManagers/{m}/resize?size=&requestId=

System parameters (`fields`, `alt`, `$alt`, `prettyPrint`, ...) are accepted; `fields` is
applied to the answer (fields.py), as for the TPU API. Any other unknown query parameter is a
400. A request beyond a per-minute rate quota (compute/limits.py) is refused before it acts.
Errors are `ComputeError`s, which the request pipeline (middleware.py) renders in compute's
envelope.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tpucared_emulator import fields
from tpucared_emulator.api import SYSTEM_PARAMETERS
from tpucared_emulator.compute import errors, official
from tpucared_emulator.compute.limits import RateLimits, metrics_of
from tpucared_emulator.compute.mig_requests import MigRequests
from tpucared_emulator.compute.requests import ComputeRequests
from tpucared_emulator.compute.resources import ZoneOperation
from tpucared_emulator.errors import ApiError
from tpucared_emulator.resources import region_of
from tpucared_emulator.schema import camel

PREFIX = "/compute/v1/"
JsonDict = dict[str, Any]
Handler = Callable[[web.Request, "re.Match[str]", dict[str, str]], Awaitable[JsonDict]]
_ID = r"([^/]+)"
_ZONE = rf"projects/{_ID}/zones/{_ID}"
_REGION = rf"projects/{_ID}/(regions/[^/]+)"
_TEMPLATES = rf"projects/{_ID}/(global|regions/[^/]+)/instanceTemplates"
_MIGS = rf"projects/{_ID}/((?:zones|regions)/[^/]+)/instanceGroupManagers"
_SCOPED_OP = rf"projects/{_ID}/(global|regions/[^/]+)/operations/{_ID}"
_RID = frozenset({"requestId"})
_Call = Callable[["re.Match[str]", dict[str, str]], "JsonDict | ZoneOperation"]
_LIST = frozenset({"filter", "maxResults", "orderBy", "pageToken", "returnPartialSuccess"})
_WAIT_STEP_S = 0.02


class _Route:
    def __init__(self, method: str, pattern: str, handler: Handler, params: frozenset[str]):
        self.method = method
        self.regex = re.compile(pattern)
        self.handler = handler
        self.params = params


class ComputeApi:
    def __init__(self, requests: ComputeRequests, groups: MigRequests) -> None:
        self.requests = requests
        self.groups = groups
        self.options = requests.options
        official.require()  # refuse to serve without Google's types, in one line that says why
        self._partials = fields.PartialMemo()
        self.limits = RateLimits(
            self.options.compute_rate_limits, self.options.compute_rate_limit_status
        )
        self.routes = [
            _Route("POST", rf"{_ZONE}/instances", self.insert,
                   frozenset({"requestId", "sourceInstanceTemplate", "sourceMachineImage"})),
            _Route("GET", rf"{_ZONE}/instances", self.list_instances, _LIST),
            _Route("GET", rf"{_ZONE}/instances/{_ID}", self.get, frozenset()),
            _Route("DELETE", rf"{_ZONE}/instances/{_ID}", self.delete,
                   frozenset({"requestId", "noGracefulShutdown"})),
            _Route("GET", rf"{_ZONE}/instances/{_ID}/getGuestAttributes", self.guest_attributes,
                   frozenset({"queryPath", "variableKey"})),
            _Route("POST", rf"{_ZONE}/instances/{_ID}/performMaintenance", self.maintenance,
                   _RID),
            _Route("POST", rf"{_ZONE}/instances/{_ID}/simulateMaintenanceEvent",
                   self.maintenance, _RID | {"withExtendedNotifications"}),
            _Route("GET", rf"{_ZONE}/operations", self.list_operations, _LIST),
            _Route("GET", rf"{_ZONE}/operations/{_ID}", self.get_operation, frozenset()),
            _Route("POST", rf"{_ZONE}/operations/{_ID}/wait", self.wait, frozenset()),
            _Route("GET", rf"{_ZONE}/machineTypes/{_ID}", self.machine_type, frozenset()),
            _Route("GET", _SCOPED_OP, self.get_scoped_operation, frozenset()),
            _Route("POST", rf"{_SCOPED_OP}/wait", self.wait_scoped, frozenset()),
        ]  # fmt: skip
        self.routes += self._group_routes()

    def _group_routes(self) -> list[_Route]:
        """Workload policies, instance templates, MIGs (compute/shared.py, mig_requests.py)."""
        shared, groups = self.groups.shared, self.groups

        def region(scope: str) -> str | None:
            return None if scope == "global" else scope.removeprefix("regions/")

        async def insert_policy(r: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
            region_ = m[2].removeprefix("regions/")
            body = await _body(r, "ResourcePolicy")
            return shared.insert_policy(m[1], region_, body, q.get("requestId")).to_json()

        async def insert_template(r: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
            body = await _body(r, "InstanceTemplate")
            op = shared.insert_template(m[1], region(m[2]), body, q.get("requestId"))
            return op.to_json()

        async def insert_mig(r: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
            body = await _body(r, "InstanceGroupManager")
            return groups.insert(m[1], m[2], body, q.get("requestId")).to_json()

        def sync(fn: _Call) -> Handler:
            async def handler(_: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
                out = fn(m, q)
                return out.to_json() if isinstance(out, ZoneOperation) else out

            return handler

        policy = rf"{_REGION}/resourcePolicies"
        return [
            _Route("POST", policy, insert_policy, _RID),
            _Route("GET", policy, sync(lambda m, q: shared.list_policies(
                m[1], m[2].removeprefix("regions/"), q)), _LIST),
            _Route("GET", rf"{policy}/{_ID}", sync(lambda m, q: shared.policy(
                m[1], m[2].removeprefix("regions/"), m[3]).to_json()), frozenset()),
            _Route("DELETE", rf"{policy}/{_ID}", sync(lambda m, q: shared.delete_policy(
                m[1], m[2].removeprefix("regions/"), m[3], q.get("requestId"))), _RID),
            _Route("POST", _TEMPLATES, insert_template, _RID),
            _Route("GET", _TEMPLATES, sync(lambda m, q: shared.list_templates(
                m[1], region(m[2]), q)), _LIST),
            _Route("GET", rf"{_TEMPLATES}/{_ID}", sync(lambda m, q: shared.template(
                m[1], region(m[2]), m[3]).to_json()), frozenset()),
            _Route("DELETE", rf"{_TEMPLATES}/{_ID}", sync(lambda m, q: shared.delete_template(
                m[1], region(m[2]), m[3], q.get("requestId"))), _RID),
            _Route("POST", _MIGS, insert_mig, _RID),
            _Route("GET", _MIGS, sync(lambda m, q: groups.list(m[1], m[2], q)), _LIST),
            _Route("GET", rf"{_MIGS}/{_ID}", sync(lambda m, q: groups.get(m[1], m[2], m[3])),
                   frozenset()),
            _Route("DELETE", rf"{_MIGS}/{_ID}", sync(lambda m, q: groups.delete(
                m[1], m[2], m[3], q.get("requestId"))), _RID),
            _Route("POST", rf"{_MIGS}/{_ID}/listManagedInstances", sync(
                lambda m, q: groups.list_managed(m[1], m[2], m[3])), _LIST),
            _Route("POST", rf"{_MIGS}/{_ID}/resize", sync(lambda m, q: groups.resize(
                m[1], m[2], m[3], q.get("size"), q.get("requestId"))), _RID | {"size"}),
        ]  # fmt: skip

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", PREFIX + "{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        raw = request.query.get("fields")
        try:
            selection = fields.parse(raw) if raw else None  # checked before the request acts
            data = await self.dispatch(request)
        except errors.ComputeError:
            raise
        except ApiError as error:  # the shared modules (fields.py, paging.py) speak the TPU
            raise errors.in_compute_envelope(error) from None  # API's envelope
        if selection is None or raw is None:
            return web.json_response(data)
        body = self._partials.body(data, selection, raw)
        return web.Response(body=body, content_type="application/json", charset="utf-8")

    async def dispatch(self, request: web.Request) -> JsonDict:
        tail = request.path.removeprefix(PREFIX)
        for route in self.routes:
            match = route.regex.fullmatch(tail)
            if match and route.method == request.method:
                query = _query(request, route.params)
                region = _region(tail)
                metrics = metrics_of(request.method, tail)
                self.limits.take(self.requests.state.now(), match[1], region, metrics)
                return await route.handler(request, match, query)
        raise errors.ComputeError(
            404, "notFound", f"The requested URL {request.path} was not found on this server."
        )

    async def insert(self, r: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        body = await _body(r, "Instance")
        return self.requests.insert(m[1], m[2], body, q.get("requestId")).to_json()

    async def maintenance(self, r: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        """instances.performMaintenance / simulateMaintenanceEvent: "The request body must be
        empty" (their reference pages); compute/maintenance.py does the rest."""
        text = (await r.text()).strip()
        extra = _empty_body(text)
        if extra is not None:
            raise errors.ComputeError(
                400,
                "invalid",
                f'Invalid JSON payload received. Unknown name "{extra}": Cannot find field.',
            )
        book = self.requests.book.maintenance
        call = book.perform if r.path.endswith("/performMaintenance") else book.simulate
        return call(m[1], m[2], m[3], q.get("requestId")).to_json()

    async def list_instances(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return self.requests.list_instances(m[1], m[2], q)

    async def get(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return self.requests.get(m[1], m[2], m[3])

    async def delete(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return self.requests.delete(m[1], m[2], m[3], q.get("requestId")).to_json()

    async def guest_attributes(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        return self.requests.guest_attributes(
            m[1], m[2], m[3], q.get("queryPath"), q.get("variableKey")
        )

    async def list_operations(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        return self.requests.list_operations(m[1], m[2], q)

    async def get_operation(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return self.requests.get_operation(m[1], m[2], m[3])

    async def wait(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        """Until DONE, or at most compute_wait_max_seconds; with
        compute_wait_early_return_probability, at once whatever the status (research §2.6)."""
        return (await self._wait(self.requests.book.operation(m[1], m[2], m[3]))).to_json()

    async def _wait(self, op: ZoneOperation) -> ZoneOperation:
        book = self.requests.book
        early = book.random() < self.options.compute_wait_early_return_probability
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (0.0 if early else self.options.compute_wait_max_seconds)
        while not op.done and loop.time() < deadline:
            await asyncio.sleep(min(_WAIT_STEP_S, max(0.0, deadline - loop.time())))
            book.state.advance()
        return op

    async def machine_type(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return self.requests.machine_type(m[1], m[2], m[3])

    def _scoped_op(self, m: re.Match[str]) -> ZoneOperation:
        key = f"projects/{m[1]}/{m[2]}/operations/{m[3]}"
        op = self.requests.book.ops.get(key)
        if op is None:
            raise errors.not_found(key)
        return op

    async def get_scoped_operation(
        self, _: web.Request, m: re.Match[str], q: dict[str, str]
    ) -> JsonDict:
        return self._scoped_op(m).to_json()

    async def wait_scoped(self, _: web.Request, m: re.Match[str], q: dict[str, str]) -> JsonDict:
        return (await self._wait(self._scoped_op(m))).to_json()


def _empty_body(text: str) -> str | None:
    """None for an empty body (or `{}`); else the first name it should not carry."""
    if not text:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return text[:20]
    if isinstance(body, dict):
        return next(iter(body), None)
    return text[:20]


def _region(tail: str) -> str:
    """The region a request counts against (rate quotas): its zone's, or its region."""
    parts = tail.split("/")
    if len(parts) > 3 and parts[2] == "zones":
        return region_of(parts[3])
    return parts[3] if len(parts) > 3 and parts[2] == "regions" else "global"


def _query(request: web.Request, allowed: frozenset[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw_name, value in request.query.items():
        if raw_name in SYSTEM_PARAMETERS:
            continue
        name = camel(raw_name)
        if name not in allowed:
            raise errors.bad_request(
                f'Invalid JSON payload received. Unknown name "{raw_name}": Cannot bind query '
                f"parameter. Field '{raw_name}' could not be found in request message."
            )
        out[name] = value
    return out


async def _body(request: web.Request, kind: str) -> object:
    """The JSON body, checked against Google's own type `kind` (official.py) first."""
    text = await request.text()
    if not text.strip():
        return {}
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise errors.bad_request(f"Invalid JSON payload received. {exc}") from None
    official.check(kind, body)
    return body
