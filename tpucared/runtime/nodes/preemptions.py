"""Reading the cloud's preemption records for the nodes a plan lost (core/nodes/preemption.py).

Between the plan and its execution (reconciler.py): when the plan marks losses (a Compute
Engine VM TERMINATED or gone: its status does not say whether it was preempted), their
locations' records are read through the optional port method `PreemptionRecords.preemptions`
(ports/cloud.py): one call per (API, project, zone) with a loss, all at once, each within
`deadline` (retries included, runtime/deadlines.py). A tick without a loss reads nothing.

A failed or late read is data (`ZoneRecords.error`), never an exception: the node is lost
either way and its delete must not wait; the core words its end by what is known. A cloud
without the method says so the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

import structlog

from tpucared.core.nodes.preemption import Where, ZoneRecords, where
from tpucared.core.vocab.actions import Loss
from tpucared.ports.cloud import CloudError, PreemptionRecords
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.deadlines import MIN_DEADLINE_S, answered_within

log = structlog.get_logger(__name__)


class PreemptionReader:
    def __init__(self, clouds: CloudMap, project: str, *, deadline: float = MIN_DEADLINE_S):
        self._clouds = clouds
        self._project = project  # what the core's DEFAULT_PROJECT means: `gcp.project`
        self.deadline = max(deadline, MIN_DEADLINE_S)

    async def read(self, losses: Iterable[Loss]) -> Mapping[Where, ZoneRecords]:
        """The records of every location with a loss, by location."""
        lost: dict[Where, set[str]] = {}
        for loss in losses:
            lost.setdefault(where(loss), set()).add(loss.node_name)
        places = sorted(lost)
        found = await asyncio.gather(*(self._one(w, lost[w]) for w in places))
        return dict(zip(places, found, strict=True))

    async def _one(self, place: Where, nodes: set[str]) -> ZoneRecords:
        api, project, zone = place
        cloud = self._clouds.clouds.get(api)
        if not isinstance(cloud, PreemptionRecords):
            return ZoneRecords(error=f"the {api} cloud keeps no preemption records")
        real = project or self._project
        what = f"preemption records of {real}/{zone}"
        try:
            records = await answered_within(
                self.deadline, what, cloud.preemptions(real, zone, sorted(nodes))
            )
        except CloudError as exc:
            log.warning(
                "preemption.records_unread", api=api, project=real, zone=zone,
                nodes=sorted(nodes), error=exc.message,
            )  # fmt: skip
            return ZoneRecords(error=exc.message)
        log.info(
            "preemption.records_read", api=api, project=real, zone=zone, nodes=sorted(nodes),
            records=[r.record or r.name for r in records],
        )  # fmt: skip
        return ZoneRecords(records=records)
