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

Multi-host slices (slices.py): one instanceGroupManagers.list of the zone per tick as well, a
partial response of what slices.py reads. The adapter cannot know whether a zone holds slice
fleets, so it asks in every zone it observes: one more request per zone per tick (one page
per 500 MIGs), whatever the zone holds. Our MIGs (by the owner and fleet their description
carries) are nodes, one each, from their members: the listed instances whose `created-by`
metadata names a MIG of the zone (hence `metadata(items)` in the instance fields). A member is
never a node of its own; a member of a MIG that is not ours, or not listed (being deleted
with it), is left out. A MIG without members yet is a node too (SLICE_CREATING or PENDING).
`slices`: the names of the zone's MIGs at the last successful observation, for `delete`;
`ran`: each RUNNING slice's members, to tell a member the MIG recreated (slices.py);
`progress`: what each of our MIGs' summaries say, for waiting.py (a waiting flex-start slice
is read again only when they move).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from tpucared.core.model.observed import ObservedNode, ZoneObservation
from tpucared.core.model.specs import OWNER_LABEL, ErrorKind
from tpucared.gcp.compute import slices as slice_rules
from tpucared.gcp.compute.client import MAX_RESULTS
from tpucared.gcp.compute.convert import instance_from_json
from tpucared.gcp.compute.waiting import progress_of
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
    "serviceAccounts(email),tags(items),metadata(items),"
    "resourceStatus(scheduling(terminationTimestamp),upcomingMaintenance))"
)
# What slices.py reads of a MIG.
MIG_LIST_FIELDS = (
    "nextPageToken,warning,items(name,id,description,creationTimestamp,targetSize,"
    "currentActions,status,targetSizePolicy,instanceTemplate,resourcePolicies)"
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
    slices: set[str] | None = None,
    ran: dict[str, dict[str, str | None]] | None = None,
    progress: dict[str, str] | None = None,
) -> ZoneObservation:
    """List the zone's instances of `owner` (every instance when None). `cache`: this zone's
    instances as converted at its previous successful list (updated here); `pages`: the
    list's pages as last read (updated by the client); `progress`: each of our MIGs'
    `waiting.progress_of` (filled after a successful list only)."""
    try:
        raw = await client.list_instances(
            project,
            zone,
            filter=owner_filter(owner) if owner is not None else None,
            max_results=MAX_RESULTS,
            fields=fields,
            memo=pages,
        )
        migs = await client.list_migs(project, zone, fields=MIG_LIST_FIELDS)
        fresh: dict[str, tuple[Mapping[str, Any], ObservedNode]] = {}
        singles, members = _split(raw, zone, cache, fresh)
        ours = [m for m in migs if _ours(m, owner)]
        made = _slices(project, zone, ours, members, ran if ran is not None else {})
        nodes = (*singles, *made)
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
        malformed = f"malformed list: {error}"
        return ZoneObservation(zone, now, error=ErrorKind.MALFORMED, error_message=malformed)
    if cache is not None:  # only after a successful observation: a failed one tells nothing
        cache.clear()
        cache.update(fresh)
    if slices is not None:
        slices.clear()
        slices.update(str(m.get("name")) for m in migs)
    if ran is not None:
        _remember(ran, ours, made, members)
    if progress is not None:
        progress.update((str(m.get("name")), progress_of(m)) for m in ours)
    return ZoneObservation(
        zone=zone, observed_at=now, nodes=nodes, queued_resources=() if queued_resources else None
    )


def _split(
    raw: Sequence[Mapping[str, Any]],
    zone: str,
    cache: NodeCache | None,
    fresh: dict[str, tuple[Mapping[str, Any], ObservedNode]],
) -> tuple[list[ObservedNode], dict[str, list[Mapping[str, Any]]]]:
    """The zone's instances: those of no group as nodes (converted, or from `cache`), and
    the members of each group by its name (a slice's workers, never nodes of their own)."""
    singles: list[ObservedNode] = []
    members: dict[str, list[Mapping[str, Any]]] = {}
    for item in raw:
        group = slice_rules.member_of(item, zone)
        if group is None:
            singles.append(convert_cached(zone, item, cache, fresh, instance_from_json))
        else:
            members.setdefault(group, []).append(item)
    return singles, members


def _slices(
    project: str,
    zone: str,
    migs: Sequence[Mapping[str, Any]],
    members: Mapping[str, list[Mapping[str, Any]]],
    ran: Mapping[str, dict[str, str | None]],
) -> list[ObservedNode]:
    """Each of our MIGs as one node, its members its workers (slices.py)."""
    made = [
        slice_rules.slice_from_json(zone, m, members.get(str(m.get("name")), ()), ran.get(_key(m)))
        for m in migs
    ]
    for node in made:
        if node.state == slice_rules.SliceState.SLICE_NO_WORKER_IDS:
            log.warning("slice.no_worker_ids", project=project, zone=zone, node=node.name)
    return made


def _ours(mig: Mapping[str, Any], owner: str | None) -> bool:
    """A MIG this daemon made (its description names our owner and a fleet); every MIG
    tpucared made when `owner` is None."""
    labels = slice_rules.mig_labels(mig)
    return labels is not None and (owner is None or labels.get(OWNER_LABEL) == owner)


def _key(mig: Mapping[str, Any]) -> str:
    """A MIG incarnation: its name and id (a MIG made again under the name starts afresh)."""
    return f"{mig.get('name')}/{mig.get('id')}"


def _remember(
    ran: dict[str, dict[str, str | None]],
    migs: Sequence[Mapping[str, Any]],
    nodes: Sequence[ObservedNode],
    members: Mapping[str, list[Mapping[str, Any]]],
) -> None:
    """Each RUNNING slice's members (name -> id), kept while its MIG is listed."""
    keys = {_key(m) for m in migs}
    for stale in set(ran) - keys:
        del ran[stale]
    for mig, node in zip(migs, nodes, strict=True):
        if node.state == slice_rules.SliceState.RUNNING:
            ran[_key(mig)] = {
                str(m.get("name")): m.get("id") if isinstance(m.get("id"), str) else None
                for m in members.get(node.name, ())
            }
