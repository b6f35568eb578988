"""The two TPU API v2alpha1 methods the emulator serves: host maintenance started early.

    POST /v2alpha1/projects/{p}/locations/{z}/nodes/{n}:performMaintenance        body empty
    POST /v2alpha1/projects/{p}/locations/{z}/nodes/{n}:simulateMaintenanceEvent  {"workerIds"}

Only v2alpha1 has them: the v2alpha1 proto (googleapis `google/cloud/tpu/v2alpha1/
cloud_tpu.proto`, 2025-02-28: `PerformMaintenance`, `SimulateMaintenanceEvent`, both
returning a long-running Operation of a Node) and the v2alpha1 discovery document
(`nodes.simulateMaintenanceEvent`, 20240530); the v2 documents have neither. The operation
they answer is an ordinary one of the zone, read with the v2 `operations.get`. Bodies are
checked strictly, in the wording of the v2 surface (official_tpu.py): performMaintenance's
"request body must be empty" (its reference page), so any field is refused;
simulateMaintenanceEvent takes `workerIds` (or `worker_ids`), a list of strings. What the
calls do: maintenance_tpu.py. Faults and the request log apply, as on /v2/.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from tpucared_emulator import errors
from tpucared_emulator.api import json_payload, query_of
from tpucared_emulator.state import EmulatorState

PREFIX = "/v2alpha1/"
_ROUTE = re.compile(
    r"projects/([^/:]+)/locations/([^/:]+)/nodes/([^/:]+)"
    r":(performMaintenance|simulateMaintenanceEvent)"
)


class V2Alpha1Api:
    def __init__(self, state: EmulatorState) -> None:
        self.state = state

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", PREFIX + "{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        match = _ROUTE.fullmatch(request.path.removeprefix(PREFIX))
        if match is None or request.method != "POST":
            raise errors.ApiError(
                "NOT_FOUND", f"The requested URL {request.path} was not found on this server."
            )
        query_of(request, frozenset())  # no query parameter but the system ones
        project, zone, node_id, verb = match.groups()
        body = await _body(request)
        maintenance = self.state.maintenance
        if verb == "performMaintenance":
            _only(body, ())
            op = maintenance.perform(project, zone, node_id)
        else:
            _only(body, ("workerIds", "worker_ids"))
            workers = body.get("workerIds", body.get("worker_ids")) or []
            if not isinstance(workers, list):
                raise _invalid_value("worker_ids", "TYPE_STRING", workers)
            for i, worker in enumerate(workers):
                if not isinstance(worker, str):
                    raise _invalid_value(f"worker_ids[{i}]", "TYPE_STRING", worker)
            op = maintenance.simulate(project, zone, node_id, workers)
        return web.json_response(op.to_json())


async def _body(request: web.Request) -> dict[str, Any]:
    body = await json_payload(request)
    if not isinstance(body, dict):
        raise errors.invalid_argument(
            f"Invalid JSON payload received. Expected an object, got {json.dumps(body)[:40]}"
        )
    return body


def _only(body: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for name in body:
        if name not in allowed:
            raise errors.invalid_argument(
                f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.',
                field=name,
            )


def _invalid_value(path: str, type_name: str, value: object) -> errors.ApiError:
    return errors.invalid_argument(
        f"Invalid value at '{path}' ({type_name}), {json.dumps(value)}", field=path
    )
