"""Reading the cloud's records of the nodes a tick finds lost (core/nodes/preemption.py).

Part of the tick's observation, before the plan (reconciler.py): when the lists show a serving
node lost where its state does not say whether it was preempted (a Compute Engine VM
TERMINATED or gone: `preemption.suspects`), their locations' records are read through the
optional port method `PreemptionRecords.preemptions` (ports/cloud.py): one call per (API,
project, zone) with a loss, all at once, each within `deadline` (retries included,
runtime/deadlines.py), and planned with. A tick without a loss reads nothing.

A failed or late read is data (`LossRecords.error`), never an exception: the node is lost
either way and its delete must not wait; the core words its end by what is known. A cloud
without the method says so the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

import structlog

from tpucared.core.model.observed import LossRecords
from tpucared.core.nodes.preemption import Where, where
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

    async def read(self, losses: Iterable[Loss]) -> Mapping[Where, LossRecords]:
        """The records of every location with a loss, by location."""
        lost: dict[Where, set[str]] = {}
        for loss in losses:
            lost.setdefault(where(loss), set()).add(loss.node_name)
        places = sorted(lost)
        found = await asyncio.gather(*(self._one(w, lost[w]) for w in places))
        return dict(zip(places, found, strict=True))

    async def _one(self, place: Where, nodes: set[str]) -> LossRecords:
        api, project, zone = place
        cloud = self._clouds.clouds.get(api)
        if not isinstance(cloud, PreemptionRecords):
            return LossRecords(error=f"the {api} cloud keeps no preemption records")
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
            return LossRecords(error=exc.message)
        log.info(
            "preemption.records_read", api=api, project=real, zone=zone, nodes=sorted(nodes),
            records=[r.record or r.name for r in records],
        )  # fmt: skip
        return LossRecords(records=records)
