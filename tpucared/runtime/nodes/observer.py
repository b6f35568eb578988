"""The observe step of a tick: what the cloud shows, one paginated list per (project, zone).

Which (project, zone) locations: every zone of a configured fleet in its project, plus the
location of every live incarnation the store remembers (a fleet removed from the config, or a
zone dropped from one, still has nodes to account for). Two fleets in two projects that share
a zone are two lists. Queued resources are listed only where they can matter: zones of fleets
that provision through queued resources and zones of live incarnations that have one. The
zones are listed concurrently, so a tick costs one round trip however many zones there are.
Each location is listed through the Cloud port of each API its fleets and live incarnations use
(clouds.py; a zone of a TPU API fleet and a compute fleet is two lists, whose observations the
planner merges, and one failed list makes the location unknown); failures come back as data
(`ZoneObservation.error`, see `Cloud.observe`), never as exceptions. What saves
work between lists (the TPU API's cached pages and conversions) is the port's own business.

No location can hold up the others. Each list has a deadline within the tick (`limit`),
retries included (`ANSWER_BY`, ports/cloud.py): the list deadline (the poll interval, at
least `LIST_FLOOR_S`) for a location never listed yet, else `SLOWER_THAN_USUAL` times the
longest of its last good lists, never under the floor: a zone that answered in 0.2 s and now
hangs costs a tick 2 s, not the HTTP timeouts of all its retries. A list that misses it is
cancelled and the location is unknown for the tick, exactly like a failed list (the planner
concludes nothing from absence there); the late answer is dropped, never used by a later
tick. The locations in `skip` (backing off after failed lists, reconciler.py) are not asked.

Each list is bounded by `LIST_BOUNDS` (ports/cloud.py) on the terms core/planning/zone_health.py
`list_terms` sets: at most ten times the pages of the location's last good list by that API,
and ten (remembered here, in memory: after a restart a zone's first lists have the client's
200-page bound, and a failing one backs off to 5 minutes, not 30 s, until it lists well once),
and a failing location's list is a probe whose requests are not retried.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

import structlog

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import IncarnationRecord, ZoneHealth
from tpucared.core.model.specs import (
    DEFAULT_API,
    DEFAULT_PROJECT,
    ErrorKind,
    FleetSpec,
    Provisioning,
    location_name,
)
from tpucared.core.planning.zone_health import list_terms
from tpucared.ports.cloud import ANSWER_BY, LIST_BOUNDS, ListBounds
from tpucared.runtime.clouds import CloudMap

log = structlog.get_logger(__name__)

Location = tuple[str, str]  # (project, zone); core DEFAULT_PROJECT for `gcp.project`

# The least time any list gets: below it a healthy list on a busy 2-core machine (10,000
# nodes, a cold cache) could miss its deadline and make its zone unknown for nothing.
LIST_FLOOR_S = 2.0
# A list may take this many times the longest of the location's recent good lists.
SLOWER_THAN_USUAL = 3.0
RECENT_LISTS = 5  # good lists remembered per location for that


@dataclass(frozen=True)
class Zones:
    nodes: frozenset[Location]  # locations whose nodes are listed
    queued: frozenset[Location]  # locations whose queued resources are listed too
    # The cloud APIs listing each location (`FleetSpec.api`, `IncarnationRecord.api`), when
    # not the TPU API's alone: a zone with a TPU API fleet and a compute fleet is two lists.
    api: Mapping[Location, tuple[str, ...]] = field(default_factory=dict)

    def apis(self, where: Location) -> tuple[str, ...]:
        return self.api.get(where, _TPU_ONLY)


_TPU_ONLY = (DEFAULT_API,)


def zones_to_observe(specs: Iterable[FleetSpec], live: Iterable[IncarnationRecord]) -> Zones:
    specs = tuple(specs)
    nodes: set[Location] = set()
    queued: set[Location] = set()
    apis: dict[Location, set[str]] = {}
    for spec in specs:
        where = {(spec.project, z) for z in spec.zones}
        nodes.update(where)
        if spec.provisioning is Provisioning.QUEUED:
            queued.update(where)
        for w in where:
            apis.setdefault(w, set()).add(spec.api)
    # A live incarnation is listed by the API that made it, whatever its fleet is now.
    for inc in live:
        nodes.add((inc.project, inc.zone))
        if inc.queued_resource is not None:
            queued.add((inc.project, inc.zone))
        apis.setdefault((inc.project, inc.zone), set()).add(inc.api)
    api = {w: tuple(sorted(a)) for w, a in apis.items() if a != {DEFAULT_API}}
    return Zones(nodes=frozenset(nodes), queued=frozenset(queued), api=api)


def by_location(observations: Iterable[ZoneObservation]) -> list[ZoneObservation]:
    """One observation per location, for what is kept per location (zone health): a failed
    list of one of its APIs if any, since the planner knows nothing of the location then."""
    out: dict[Location, ZoneObservation] = {}
    for obs in observations:
        where = (obs.project, obs.zone)
        if where not in out or (out[where].ok and not obs.ok):
            out[where] = obs
    return list(out.values())


class Observer:
    def __init__(self, clouds: CloudMap, project: str, *, deadline: float = LIST_FLOOR_S) -> None:
        self._clouds = clouds
        self._project = project  # what DEFAULT_PROJECT means: `gcp.project`
        self.deadline = max(deadline, LIST_FLOOR_S)  # a list never listed fine gets this long
        # Seconds of each location's good lists, per API listing it.
        self._took: dict[tuple[Location, str], deque[float]] = {}
        # Pages of each location's last good list (its longest), per API listing it.
        self._pages: dict[tuple[Location, str], int] = {}
        self._apis: dict[Location, tuple[str, ...]] = {}  # the APIs that listed it last

    def bounded(self, where: Location) -> bool:
        """Whether every API listing the location has listed it well (its lists are bounded
        by that, and a failing one is probed every 30 s: core/planning/zone_health.py)."""
        apis = self._apis.get(where, ())
        return bool(apis) and all((where, api) in self._pages for api in apis)

    @property
    def project(self) -> str:
        """What the core's DEFAULT_PROJECT means here: `gcp.project`."""
        return self._project

    def project_of(self, project: str) -> str:
        return project or self._project

    def limit(self, where: Location, api: str = DEFAULT_API) -> float:
        """Seconds this location's list may take within a tick (module docstring)."""
        recent = self._took.get((where, api))
        if not recent:
            return self.deadline
        return min(self.deadline, max(LIST_FLOOR_S, SLOWER_THAN_USUAL * max(recent)))

    async def observe(
        self,
        zones: Zones,
        now: datetime,
        *,
        skip: Mapping[Location, ZoneObservation] | None = None,
        health: Mapping[Location, ZoneHealth] | None = None,
    ) -> tuple[ZoneObservation, ...]:
        """List every location at once, through the port of each API listing it and within
        its `limit`; the observations come back sorted by (project, zone, api), each carrying
        the project as the core knows it and the API that listed it. `skip`: what to say of
        the locations not asked (once each); `health`: the locations' list health, for
        `list_terms`."""
        skip = skip or {}
        health = health or {}
        lists = [(w, a) for w in sorted(zones.nodes) for a in zones.apis(w) if w not in skip]
        for where in zones.nodes:
            self._apis[where] = zones.apis(where)

        async def one(where: Location, api: str) -> ZoneObservation:
            project = where[0]
            pages, retry = list_terms(health.get(where), self._pages.get((where, api)))
            LIST_BOUNDS.set(ListBounds(pages=pages, retry=retry))  # this list's task alone
            obs = await self._listed(where, api, zones, now)
            if project != DEFAULT_PROJECT:
                obs = replace(obs, project=project)
            # The API that listed it, and what its cloud can do (core/model/abilities.py).
            return replace(obs, api=api, abilities=self._clouds.of(api).abilities)

        listed = await asyncio.gather(*(one(where, api) for where, api in lists))
        skipped = [skip[w] for w in zones.nodes if w in skip]
        return tuple(sorted((*listed, *skipped), key=lambda o: (o.project, o.zone, o.api)))

    async def _listed(
        self, where: Location, api: str, zones: Zones, now: datetime
    ) -> ZoneObservation:
        """One location's list by one API within its limit (in its own task: `gather` made
        one, so ANSWER_BY is this list's alone)."""
        project, zone = where
        cloud = self._clouds.of(api)
        limit = self.limit(where, api)
        loop = asyncio.get_running_loop()
        started = loop.time()
        ANSWER_BY.set(started + limit)
        try:
            async with asyncio.timeout(limit):
                obs = await cloud.observe(
                    self.project_of(project), zone, now, queued_resources=where in zones.queued
                )
        except TimeoutError:
            message = f"no answer within {limit:.1f} s (the list's deadline, retries included)"
            log.warning("zone.list_timed_out", project=self.project_of(project), zone=zone,
                        limit_s=round(limit, 2))  # fmt: skip
            return ZoneObservation(
                zone=zone, observed_at=now, error=ErrorKind.TRANSIENT, error_message=message
            )
        if obs.ok:
            took = self._took.setdefault((where, api), deque(maxlen=RECENT_LISTS))
            took.append(loop.time() - started)
            bounds = LIST_BOUNDS.get()
            if bounds is not None and bounds.longest:
                self._pages[(where, api)] = bounds.longest
        return obs


def summarize(observations: Iterable[ZoneObservation]) -> Mapping[str, object]:
    """A few numbers for the tick's log line."""
    obs = list(observations)
    return {
        "zones": len(obs),
        "nodes_listed": sum(len(o.nodes) for o in obs),
        "zones_failed": sorted(location_name(o.project, o.zone) for o in obs if not o.ok),
    }
