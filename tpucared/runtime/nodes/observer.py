"""The observe step of a tick: what the cloud shows, one paginated list per (project, zone).

Which (project, zone) locations: every zone of a configured fleet in its project, plus the
location of every live incarnation the store remembers (a fleet removed from the config, or a
zone dropped from one, still has nodes to account for). Two fleets in two projects that share
a zone are two lists. Queued resources are listed only where they can matter: zones of fleets
that provision through queued resources and zones of live incarnations that have one. The
zones are listed concurrently, so a tick costs one round trip however many zones there are.
Failures come back as data (`ZoneObservation.error`, see gcp/observe.py), never as exceptions.
The observer keeps each zone's `NodeCache` and `PageMemo`, so unchanged pages are not parsed
and unchanged nodes are not converted again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import DEFAULT_PROJECT, FleetSpec, Provisioning, location_name
from tpucared.gcp.responses import PageMemo
from tpucared.gcp.tpu import TpuClient, observe_zone
from tpucared.gcp.tpu.observe import NodeCache

Location = tuple[str, str]  # (project, zone); core DEFAULT_PROJECT for `gcp.project`


@dataclass(frozen=True)
class Zones:
    nodes: frozenset[Location]  # locations whose nodes are listed
    queued: frozenset[Location]  # locations whose queued resources are listed too


def zones_to_observe(specs: Iterable[FleetSpec], live: Iterable[IncarnationRecord]) -> Zones:
    nodes: set[Location] = set()
    queued: set[Location] = set()
    for spec in specs:
        where = {(spec.project, z) for z in spec.zones}
        nodes.update(where)
        if spec.provisioning is Provisioning.QUEUED:
            queued.update(where)
    for inc in live:
        nodes.add((inc.project, inc.zone))
        if inc.queued_resource is not None:
            queued.add((inc.project, inc.zone))
    return Zones(nodes=frozenset(nodes), queued=frozenset(queued))


class Observer:
    def __init__(self, client: TpuClient, project: str) -> None:
        self._client = client
        self._project = project  # what DEFAULT_PROJECT means: `gcp.project`
        self._caches: dict[Location, NodeCache] = {}  # its nodes at the last list
        self._pages: dict[Location, PageMemo] = {}  # its node list's pages as last read

    def project_of(self, project: str) -> str:
        return project or self._project

    async def observe(self, zones: Zones, now: datetime) -> tuple[ZoneObservation, ...]:
        """List every location at once; the observations come back sorted by (project,
        zone), each carrying the project as the core knows it."""
        ordered = sorted(zones.nodes)
        self._caches = {z: c for z, c in self._caches.items() if z in zones.nodes}
        self._pages = {z: m for z, m in self._pages.items() if z in zones.nodes}

        async def one(where: Location) -> ZoneObservation:
            project, zone = where
            obs = await observe_zone(
                self._client,
                self.project_of(project),
                zone,
                now,
                queued_resources=where in zones.queued,
                cache=self._caches.setdefault(where, {}),
                pages=self._pages.setdefault(where, PageMemo()),
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
