"""`observe_zone`: what the daemon learns about one (project, zone) per tick.

One paginated nodes.list (plus, when asked, one paginated queuedResources.list), converted
to domain observations. A failure never raises ApiError: it becomes a `ZoneObservation` with
`error` set and nothing else, because "the list failed" and "the zone is empty" must never
look the same to the planner. If either list fails the whole zone is unknown for the tick.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import structlog

from tpucared.core.model import ErrorKind, ObservedQueuedResource, ZoneObservation
from tpucared.gcp.convert import node_from_json, queued_resource_from_json
from tpucared.gcp.errors import ApiError

if TYPE_CHECKING:
    from tpucared.gcp.client import TpuClient

log = structlog.get_logger(__name__)


async def observe_zone(
    client: TpuClient,
    project: str,
    zone: str,
    now: datetime,
    *,
    queued_resources: bool = False,
) -> ZoneObservation:
    """List the zone's nodes (and its queued resources if `queued_resources`)."""
    try:
        raw_nodes = await client.list_nodes(project, zone)
        nodes = tuple(node_from_json(zone, item) for item in raw_nodes)
        queued: tuple[ObservedQueuedResource, ...] | None = None
        if queued_resources:
            raw_queued = await client.list_queued_resources(project, zone)
            queued = tuple(queued_resource_from_json(zone, item) for item in raw_queued)
    except ApiError as error:
        log.warning(
            "zone observation failed",
            project=project,
            zone=zone,
            kind=error.kind.value,
            error=str(error),
        )
        return ZoneObservation(
            zone=zone, observed_at=now, error=error.kind, error_message=str(error)
        )
    except ValueError as error:
        # A resource we cannot read: report the zone as unreadable rather than drop it and
        # let the planner think it vanished.
        log.warning("zone observation unreadable", project=project, zone=zone, error=str(error))
        return ZoneObservation(
            zone=zone, observed_at=now, error=ErrorKind.TRANSIENT, error_message=str(error)
        )
    return ZoneObservation(zone=zone, observed_at=now, nodes=nodes, queued_resources=queued)
