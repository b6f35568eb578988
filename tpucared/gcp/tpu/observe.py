"""`observe_zone`: what the daemon learns about one (project, zone) per tick.

One paginated nodes.list (plus, when asked, one paginated queuedResources.list), converted
to domain observations. A failure never raises ApiError: it becomes a `ZoneObservation` with
`error` set and nothing else, because "the list failed" and "the zone is empty" must never
look the same to the planner. If either list fails, or any listed resource does not have the
documented shape (convert.py), or a node is listed twice, the whole zone is unknown for the
tick (`ErrorKind.MALFORMED`), and the planner neither creates nor deletes there.

Both lists ask for pages of `LIST_PAGE_SIZE`. The API's default page size is undocumented
(field notes; the emulator's is 5, on purpose): left to it, a zone of 2,500 nodes could cost
hundreds of requests a tick. `pageSize` is "the maximum number of items to return"
(tpu.v2 discovery document) and Google's pagination guideline (AIP-158) has a service
coerce a value above its maximum down to it, typically 1,000, and possibly return fewer:
so we ask for 1,000 and follow `nextPageToken` whatever page size comes back.

The node list also asks for a partial response (`fields`, a global parameter of the v2
discovery document that every Google API honours): only the fields convert.py reads. A node
as the API renders it carries much more (network config, metadata with every SSH key, the
scheduling config, disks...): at 10,000 nodes, parsing all of it every poll was the largest
part of observing.

With a `NodeCache` (the runtime keeps one per zone; gcp/observing.py), a node listed exactly
as in the previous successful list of the zone keeps its `ObservedNode`. With a `PageMemo`
as well, a page listed byte for byte as last time is not even parsed: its nodes
are the very objects of the last list, found in the cache by identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from tpucared.core.model.observed import ObservedNode, ObservedQueuedResource, ZoneObservation
from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.errors import ApiError
from tpucared.gcp.observing import NodeCache, convert_cached, refuse_duplicates
from tpucared.gcp.responses import PageMemo
from tpucared.gcp.tpu.convert import node_from_json, queued_resource_from_json

if TYPE_CHECKING:
    from tpucared.gcp.tpu.client import TpuClient

__all__ = ["LIST_PAGE_SIZE", "NODE_LIST_FIELDS", "NodeCache", "observe_zone"]

log = structlog.get_logger(__name__)

# Items per list page we ask for (see the module docstring): 1,000 is AIP-158's usual maximum.
LIST_PAGE_SIZE = 1000

# What convert.node_from_json reads of a node, and what the paging needs of a page.
NODE_LIST_FIELDS = (
    "nextPageToken,unreachable,nodes(name,id,state,health,labels,createTime,acceleratorType,"
    "runtimeVersion,queuedResource,networkEndpoints(ipAddress,accessConfig/externalIp),"
    "networkConfig(network,subnetwork),serviceAccount/email,tags,upcomingMaintenance)"
)


async def observe_zone(
    client: TpuClient,
    project: str,
    zone: str,
    now: datetime,
    *,
    queued_resources: bool = False,
    cache: NodeCache | None = None,
    pages: PageMemo | None = None,
) -> ZoneObservation:
    """List the zone's nodes (and its queued resources if `queued_resources`). `cache`: this
    zone's nodes as converted at its previous successful list (updated here); `pages`: the
    node list's pages as last read (updated by the client)."""
    try:
        raw_nodes = await client.list_nodes(
            project, zone, page_size=LIST_PAGE_SIZE, fields=NODE_LIST_FIELDS, memo=pages
        )
        fresh: dict[str, tuple[Mapping[str, Any], ObservedNode]] = {}
        nodes = tuple(
            convert_cached(zone, item, cache, fresh, node_from_json) for item in raw_nodes
        )
        refuse_duplicates(nodes)
        queued: tuple[ObservedQueuedResource, ...] | None = None
        if queued_resources:
            raw_queued = await client.list_queued_resources(project, zone, page_size=LIST_PAGE_SIZE)
            queued = tuple(queued_resource_from_json(zone, item) for item in raw_queued)
    except ApiError as error:
        log.warning(
            "zone.list_failed",
            project=project,
            zone=zone,
            kind=error.kind.value,
            error=str(error),
        )
        return ZoneObservation(
            zone=zone, observed_at=now, error=error.kind, error_message=str(error)
        )
    except (ValueError, RecursionError) as error:
        # A resource we cannot read: report the zone as unreadable rather than drop it and
        # let the planner think it vanished (or is not ours).
        log.warning("zone.list_unreadable", project=project, zone=zone, error=str(error))
        return ZoneObservation(
            zone=zone,
            observed_at=now,
            error=ErrorKind.MALFORMED,
            error_message=f"malformed list: {error}",
        )
    if cache is not None:  # only after a successful observation: a failed one tells nothing
        cache.clear()
        cache.update(fresh)
    return ZoneObservation(zone=zone, observed_at=now, nodes=nodes, queued_resources=queued)
