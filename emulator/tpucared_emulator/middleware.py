"""The request pipeline every API call goes through, and the Google error envelope for all.

For a /v2, /compute/v1 (or OS Login /v1/users) request, in order: bring the state's clock up to date
(`state.advance()`), ask the fault injector what to do (latency, an error instead of a
response, a dropped connection, an error after the request took effect, or a hostile
answer, hostile.py), run the handler, turn
`ApiError` into the AIP-193 envelope, and append one record to the request log (its `fault` is
the kind injected; a `malformed` mode that does not fit the request is not logged as one).
/_emulator requests skip faults and the log but get the same clock update and error envelope,
so tests see consistent state.
"""

from __future__ import annotations

import asyncio

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tpucared_emulator import hostile
from tpucared_emulator.compute.errors import ComputeError, compute_fault_error
from tpucared_emulator.errors import ApiError, internal
from tpucared_emulator.faults import Fault, FaultInjector, fault_error
from tpucared_emulator.requestlog import RequestLog, RequestRecord
from tpucared_emulator.state import EmulatorState

log = structlog.get_logger(__name__)

API_PREFIX = "/v2/"
COMPUTE_PREFIX = "/compute/v1/"
# Calls that get faults and the request log: the TPU API (v2, and the v2alpha1 maintenance
# methods of api_v2alpha1.py), the Compute Engine API (compute/) and the OS Login API
# (oslogin.py).
LOGGED_PREFIXES = (API_PREFIX, "/v2alpha1/", COMPUTE_PREFIX, "/v1/users/")


def error_response(error: ApiError) -> web.Response:
    return web.json_response(error.envelope(), status=error.http_status, headers=error.headers)


async def _run(handler: Handler, request: web.Request) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(error)
    except web.HTTPException:
        raise
    except Exception:
        log.exception("emulator.handler_failed", method=request.method, path=request.path)
        if request.path.startswith(COMPUTE_PREFIX):
            return error_response(ComputeError(500, "backendError", "Internal Error"))
        return error_response(internal())


def _drop(request: web.Request) -> web.Response:
    """Close the connection without answering; the client sees a disconnect."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=500)  # never reaches the client: the transport is closed


def make_middleware(
    state: EmulatorState, faults: FaultInjector, requests: RequestLog
) -> Middleware:
    @web.middleware
    async def pipeline(request: web.Request, handler: Handler) -> web.StreamResponse:
        state.advance()
        if not request.path.startswith(LOGGED_PREFIXES):
            return await _run(handler, request)
        arrived = state.now()
        delay, fault = faults.decide(request.method, request.path)
        if delay:
            await asyncio.sleep(delay)
            state.advance()
        response: web.StreamResponse
        if fault is not None and fault.kind == "malformed":

            async def run(real: web.Request) -> web.StreamResponse:
                state.advance()  # a stall may have passed time
                return await _run(handler, real)

            response, applied = await hostile.respond(fault, request, run)
            fault = fault if applied else None
        elif fault is not None and not fault.after:
            response = _apply(fault, request)
        else:
            response = await _run(handler, request)
            if fault is not None:
                response = _apply(fault, request)
        status = 0 if fault is not None and fault.kind == "drop" else response.status
        requests.add(
            RequestRecord(
                method=request.method,
                path=request.path,
                query=dict(request.query),
                status=status,
                time=arrived,
                fault=fault.kind if fault is not None else None,
            )
        )
        return response

    return pipeline


def _apply(fault: Fault, request: web.Request) -> web.Response:
    if fault.kind == "drop":
        return _drop(request)
    if request.path.startswith(COMPUTE_PREFIX):  # compute's own envelope and reasons
        return error_response(compute_fault_error(fault, request.method, request.path))
    return error_response(fault_error(fault, request.method, request.path))
