"""The control API for Compute Engine instances: what the cloud does to a VM, on demand.

    POST /_emulator/v1/projects/{p}/zones/{z}/instances/{name}:preempt   [{"notice_seconds": S}]
         honours the VM's instanceTerminationAction (DELETE: gone; STOP: TERMINATED) and
         records a `compute.instances.preempted` operation; with S, `instance/preempted` is
         TRUE on the VM's metadata server for S seconds first
    POST .../instances/{name}:terminate     TERMINATED at once, no preempted operation
    POST .../instances/{name}:schedule-maintenance {"start_in_seconds": S, "duration_seconds": D,
         "type": "SCHEDULED", "can_reschedule": B}  a host-maintenance window in
         `resourceStatus.upcomingMaintenance` and the VM's `instance/upcoming-maintenance`
         (emulator/maintenance.py), which then happens (compute/maintenance.py: the notice in
         `instance/maintenance-event`, the VM terminated at S, restarted after D)
    POST .../instances/{name}:vanish        gone at once, no operation
    GET  /_emulator/v1/instances            {"instances": [internal view incl. the worker IP]}
    PUT  /_emulator/v1/quota {"region", "family", "chips": N | null}   the chip quota of a
         machine family (tpu7x, ct6e, ct5p) in a region; GET lists them with what is in use

Each answers the internal view of the instance (`{}` for :vanish). Like the rest of
`/_emulator`, never subject to faults or the request log (control.py has the TPU side).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tpucared_emulator import errors, maintenance
from tpucared_emulator.catalog import MACHINE_TYPES
from tpucared_emulator.compute.book import ComputeBook
from tpucared_emulator.compute.resources import Instance
from tpucared_emulator.control_body import json_object

PREFIX = "/_emulator/v1"


def internal_json(inst: Instance) -> dict[str, Any]:
    return {
        "project": inst.project,
        "zone": inst.zone,
        "name": inst.name,
        "status": inst.status,
        "machine_type": inst.machine.name,
        "termination_action": inst.termination_action,
        "spot": inst.spot,
        "doomed": inst.doomed is not None,
        "notice_at": inst.host.notice_at,
        "maintenance": maintenance.shown(inst.host.maintenance),
        "maintenance_event": inst.host.maintenance_event(0),  # compute/maintenance.py
        "maintenance_down": inst.host.host_maintenance is not None
        and inst.host.host_maintenance.down,
        "workers": [{"index": 0, "ip": inst.worker.ip, "host_key": inst.worker.host_public_key}],
        "instance": inst.to_json(),
    }


class ComputeControl:
    def __init__(self, book: ComputeBook) -> None:
        self.book = book

    def add_routes(self, app: web.Application) -> None:
        path = PREFIX + "/projects/{project}/zones/{zone}/instances/{name_action}"
        app.router.add_post(path, self.instance_action)
        app.router.add_get(PREFIX + "/instances", self.list_instances)
        app.router.add_get(PREFIX + "/quota", self.get_quota)
        app.router.add_put(PREFIX + "/quota", self.put_quota)

    async def instance_action(self, request: web.Request) -> web.Response:
        project, zone = request.match_info["project"], request.match_info["zone"]
        name, _, action = request.match_info["name_action"].partition(":")
        if action == "vanish":
            self.book.vanish(project, zone, name)
            return web.json_response({})
        if action == "terminate":
            return web.json_response(internal_json(self.book.terminate(project, zone, name)))
        if action == "schedule-maintenance":
            inst = self.book.instance(project, zone, name)
            self.book.maintenance.announce_window(inst, await json_object(request))
            return web.json_response(internal_json(inst))
        if action != "preempt":
            raise errors.invalid_argument(
                f"unknown instance action {action!r}; one of "
                "['preempt', 'terminate', 'vanish', 'schedule-maintenance']"
            )
        notice = (await json_object(request)).get("notice_seconds")
        if notice is not None and (
            not isinstance(notice, int | float) or isinstance(notice, bool) or notice < 0
        ):
            raise errors.invalid_argument("notice_seconds must be a number >= 0")
        inst = self.book.preempt(project, zone, name, notice)
        return web.json_response(internal_json(inst))

    async def list_instances(self, _: web.Request) -> web.Response:
        instances = [internal_json(i) for i in self.book.instances.values()]
        return web.json_response({"instances": instances})

    async def get_quota(self, _: web.Request) -> web.Response:
        quota = [
            {"region": r, "family": f, "chips": n, "in_use": self.book.quota_used(r, f)}
            for (r, f), n in sorted(self.book.quota.items())
        ]
        return web.json_response({"quota": quota})

    async def put_quota(self, request: web.Request) -> web.Response:
        body = await json_object(request)
        region, family, chips = body.get("region"), body.get("family"), body.get("chips")
        families = sorted({m.family for m in MACHINE_TYPES.values()})
        if not isinstance(region, str) or family not in families:
            raise errors.invalid_argument(f"region (a string) and family (one of {families})")
        if chips is not None and (
            not isinstance(chips, int) or isinstance(chips, bool) or chips < 0
        ):
            raise errors.invalid_argument("chips must be an integer >= 0 or null")
        if chips is None:
            self.book.quota.pop((region, str(family)), None)
        else:
            self.book.quota[(region, str(family))] = chips
        return await self.get_quota(request)
