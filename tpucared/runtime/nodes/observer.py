"""The observe step of a tick: what the cloud shows, one paginated list per (project, zone).

Which zones: every zone of a configured fleet, plus the zone of every live incarnation the
store remembers (a fleet removed from the config, or a zone dropped from one, still has nodes
to account for). Queued resources are listed only where they can matter: zones of fleets
that provision through queued resources and zones of live incarnations that have one. The
zones are listed concurrently, so a tick costs one round trip however many zones there are.
Failures come back as data (`ZoneObservation.error`, see gcp/observe.py), never as exceptions.
The observer keeps each zone's `NodeCache`, so unchanged nodes are not converted again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import FleetSpec, Provisioning
from tpucared.gcp import TpuClient, observe_zone
from tpucared.gcp.observe import NodeCache


@dataclass(frozen=True)
class Zones:
    nodes: frozenset[str]  # zones whose nodes are listed
    queued: frozenset[str]  # zones whose queued resources are listed too


def zones_to_observe(specs: Iterable[FleetSpec], live: Iterable[IncarnationRecord]) -> Zones:
    nodes: set[str] = set()
    queued: set[str] = set()
    for spec in specs:
        nodes.update(spec.zones)
        if spec.provisioning is Provisioning.QUEUED:
            queued.update(spec.zones)
    for inc in live:
        nodes.add(inc.zone)
        if inc.queued_resource is not None:
            queued.add(inc.zone)
    return Zones(nodes=frozenset(nodes), queued=frozenset(queued))


class Observer:
    def __init__(self, client: TpuClient, project: str) -> None:
        self._client = client
        self._project = project
        self._caches: dict[str, NodeCache] = {}  # zone -> its nodes at the last list

    async def observe(self, zones: Zones, now: datetime) -> tuple[ZoneObservation, ...]:
        """List every zone at once; the observations come back sorted by zone."""
        ordered = sorted(zones.nodes)
        self._caches = {z: c for z, c in self._caches.items() if z in zones.nodes}
        return tuple(
            await asyncio.gather(
                *(
                    observe_zone(
                        self._client,
                        self._project,
                        zone,
                        now,
                        queued_resources=zone in zones.queued,
                        cache=self._caches.setdefault(zone, {}),
                    )
                    for zone in ordered
                )
            )
        )


def summarize(observations: Iterable[ZoneObservation]) -> Mapping[str, object]:
    """A few numbers for the tick's log line."""
    obs = list(observations)
    return {
        "zones": len(obs),
        "nodes_listed": sum(len(o.nodes) for o in obs),
        "zones_failed": sorted(o.zone for o in obs if not o.ok),
    }
