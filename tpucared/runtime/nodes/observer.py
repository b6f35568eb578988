"""The observe step of a tick: what the cloud shows, one paginated list per (project, zone).

Which (project, zone) locations: every zone of a configured fleet in its project, plus the
location of every live incarnation the store remembers (a fleet removed from the config, or a
zone dropped from one, still has nodes to account for). Two fleets in two projects that share
a zone are two lists. Queued resources are listed only where they can matter: zones of fleets
that provision through queued resources and zones of live incarnations that have one. The
zones are listed concurrently, so a tick costs one round trip however many zones there are.
Each location is listed through the Cloud port of its fleets' API (clouds.py); failures come
back as data (`ZoneObservation.error`, see `Cloud.observe`), never as exceptions. What saves
work between lists (the TPU API's cached pages and conversions) is the port's own business.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import (
    DEFAULT_API,
    DEFAULT_PROJECT,
    FleetSpec,
    Provisioning,
    location_name,
)
from tpucared.runtime.clouds import CloudMap

Location = tuple[str, str]  # (project, zone); core DEFAULT_PROJECT for `gcp.project`


@dataclass(frozen=True)
class Zones:
    nodes: frozenset[Location]  # locations whose nodes are listed
    queued: frozenset[Location]  # locations whose queued resources are listed too
    # The cloud API listing each location (`FleetSpec.api`), when not DEFAULT_API.
    api: Mapping[Location, str] = field(default_factory=dict)


def zones_to_observe(specs: Iterable[FleetSpec], live: Iterable[IncarnationRecord]) -> Zones:
    specs = tuple(specs)
    nodes: set[Location] = set()
    queued: set[Location] = set()
    api: dict[Location, str] = {}
    fleet_api = {spec.name: spec.api for spec in specs}
    for spec in specs:
        where = {(spec.project, z) for z in spec.zones}
        nodes.update(where)
        if spec.provisioning is Provisioning.QUEUED:
            queued.update(where)
        if spec.api != DEFAULT_API:
            api.update(dict.fromkeys(where, spec.api))
    for inc in live:
        nodes.add((inc.project, inc.zone))
        if inc.queued_resource is not None:
            queued.add((inc.project, inc.zone))
        if fleet_api.get(inc.fleet, DEFAULT_API) != DEFAULT_API:
            api.setdefault((inc.project, inc.zone), fleet_api[inc.fleet])
    return Zones(nodes=frozenset(nodes), queued=frozenset(queued), api=api)


class Observer:
    def __init__(self, clouds: CloudMap, project: str) -> None:
        self._clouds = clouds
        self._project = project  # what DEFAULT_PROJECT means: `gcp.project`

    def project_of(self, project: str) -> str:
        return project or self._project

    async def observe(self, zones: Zones, now: datetime) -> tuple[ZoneObservation, ...]:
        """List every location at once, each through its cloud's port; the observations come
        back sorted by (project, zone), each carrying the project as the core knows it."""
        ordered = sorted(zones.nodes)

        async def one(where: Location) -> ZoneObservation:
            project, zone = where
            cloud = self._clouds.of(zones.api.get(where, DEFAULT_API))
            obs = await cloud.observe(
                self.project_of(project), zone, now, queued_resources=where in zones.queued
            )
            return obs if project == DEFAULT_PROJECT else replace(obs, project=project)

        return tuple(await asyncio.gather(*(one(where) for where in ordered)))


def summarize(observations: Iterable[ZoneObservation]) -> Mapping[str, object]:
    """A few numbers for the tick's log line."""
    obs = list(observations)
    return {
        "zones": len(obs),
        "nodes_listed": sum(len(o.nodes) for o in obs),
        "zones_failed": sorted(location_name(o.project, o.zone) for o in obs if not o.ok),
    }
