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

With a `NodeCache` (the runtime keeps one per zone), a node listed exactly as in the previous
successful list of the zone keeps its `ObservedNode`: at 10,000 nodes, converting every node
every tick cost more than the planning. Comparing the two JSON objects is cheap, and the
conversion is a pure function of them, so the result is the same either way. With a
`PageMemo` as well, a page listed byte for byte as last time is not even parsed: its nodes
are the very objects of the last list, found in the cache by identity.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from tpucared.core.model.observed import ObservedNode, ObservedQueuedResource, ZoneObservation
from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.errors import ApiError
from tpucared.gcp.responses import PageMemo
from tpucared.gcp.tpu.convert import MalformedResource, node_from_json, queued_resource_from_json

if TYPE_CHECKING:
    from tpucared.gcp.tpu.client import TpuClient

log = structlog.get_logger(__name__)

# Items per list page we ask for (see the module docstring): 1,000 is AIP-158's usual maximum.
LIST_PAGE_SIZE = 1000

# What convert.node_from_json reads of a node, and what the paging needs of a page.
NODE_LIST_FIELDS = (
    "nextPageToken,unreachable,nodes(name,id,state,health,labels,createTime,acceleratorType,"
    "runtimeVersion,queuedResource,networkEndpoints(ipAddress,accessConfig/externalIp),"
    "networkConfig(network,subnetwork),serviceAccount/email,tags)"
)

# Resource name -> (the node's JSON as last listed, its conversion): one zone's nodes.
NodeCache = MutableMapping[str, tuple[Mapping[str, Any], ObservedNode]]


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
        nodes = tuple(_convert(zone, item, cache, fresh) for item in raw_nodes)
        _refuse_duplicates(nodes)
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


def _refuse_duplicates(nodes: tuple[ObservedNode, ...]) -> None:
    """A node listed twice in one list (say READY and PREEMPTED) is an inconsistent
    observation, not evidence either way: the zone is unknown for this tick."""
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise MalformedResource(f"node {node.name} listed twice in one list")
        seen.add(node.name)


def _convert(
    zone: str,
    item: Mapping[str, Any],
    cache: NodeCache | None,
    fresh: dict[str, tuple[Mapping[str, Any], ObservedNode]],
) -> ObservedNode:
    name = item.get("name")
    if cache is None or not isinstance(name, str):
        return node_from_json(zone, item)
    seen = cache.get(name)
    # `is` first: an unchanged page's items are the last list's own objects (PageMemo).
    same = seen is not None and (seen[0] is item or seen[0] == item)
    node = seen[1] if same and seen is not None else node_from_json(zone, item)
    fresh[name] = (item, node)
    return node
