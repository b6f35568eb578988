"""`observe_zone`: what the daemon learns about one (project, zone) of Compute Engine per tick.

One paginated instances.list, filtered to our owner's instances
(`labels.tpucared-owner=OWNER`: the others are not ours to act on, and need not be read),
converted to domain observations. As for TPU nodes (tpu/observe.py), a failure never raises:
it becomes a `ZoneObservation` with `error` set and nothing else, because "the list failed"
and "the zone is empty" must never look the same to the planner. If the list fails, or any
listed instance does not have the documented shape (convert.py), or one is listed twice,
the whole zone is unknown for the tick (MALFORMED).

Pages of `MAX_RESULTS` (500, compute v1's maximum and default) and a partial response
(`fields`): only what convert.py reads, plus what the paging needs (`nextPageToken`,
`warning`). With a `NodeCache` and a `PageMemo` (gcp/observing.py, gcp/responses.py) an
unchanged page is not parsed and an unchanged instance not converted again.

Compute Engine has no queued resources: asked for them, the observation lists none.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from tpucared.core.model.observed import ObservedNode, ZoneObservation
from tpucared.core.model.specs import OWNER_LABEL, ErrorKind
from tpucared.gcp.compute.client import MAX_RESULTS
from tpucared.gcp.compute.convert import instance_from_json
from tpucared.gcp.errors import ApiError
from tpucared.gcp.observing import NodeCache, convert_cached, refuse_duplicates
from tpucared.gcp.responses import PageMemo

if TYPE_CHECKING:
    from tpucared.gcp.compute.client import ComputeClient

log = structlog.get_logger(__name__)

# What convert.instance_from_json reads of an instance, and what the paging needs of a page.
INSTANCE_LIST_FIELDS = (
    "nextPageToken,warning,items(name,id,status,labels,creationTimestamp,machineType,"
    "networkInterfaces(network,subnetwork,networkIP,accessConfigs(natIP)),"
    "serviceAccounts(email),tags(items),scheduling(terminationTime))"
)


def owner_filter(owner: str) -> str:
    """The instances.list filter of one owner's instances (AIP-160 equality on a label; a
    label value is [a-z0-9_-], nothing to quote)."""
    return f"labels.{OWNER_LABEL}={owner}"


async def observe_zone(
    client: ComputeClient,
    project: str,
    zone: str,
    now: datetime,
    *,
    owner: str | None,
    queued_resources: bool = False,
    fields: str | None = INSTANCE_LIST_FIELDS,
    cache: NodeCache | None = None,
    pages: PageMemo | None = None,
) -> ZoneObservation:
    """List the zone's instances of `owner` (every instance when None). `cache`: this zone's
    instances as converted at its previous successful list (updated here); `pages`: the
    list's pages as last read (updated by the client)."""
    try:
        raw = await client.list_instances(
            project,
            zone,
            filter=owner_filter(owner) if owner is not None else None,
            max_results=MAX_RESULTS,
            fields=fields,
            memo=pages,
        )
        fresh: dict[str, tuple[Mapping[str, Any], ObservedNode]] = {}
        nodes = tuple(convert_cached(zone, item, cache, fresh, instance_from_json) for item in raw)
        refuse_duplicates(nodes)
    except ApiError as error:
        log.warning(
            "zone.list_failed", project=project, zone=zone, kind=error.kind.value, error=str(error)
        )
        return ZoneObservation(
            zone=zone, observed_at=now, error=error.kind, error_message=str(error)
        )
    except (ValueError, RecursionError) as error:
        # An instance we cannot read: the zone is unreadable, rather than the instance
        # dropped and thought vanished (or not ours).
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
    return ZoneObservation(
        zone=zone, observed_at=now, nodes=nodes, queued_resources=() if queued_resources else None
    )
