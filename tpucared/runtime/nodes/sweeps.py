"""Sweeping a cloud's shared resources (the optional port `SharedResources`, ports/cloud.py):
which locations core/nodes/sweep.py says, each in its own background task.

After a tick whose plan confirms a multi-host node DELETED (`after_plan`), once at daemon start
(`at_start`), and at the end of `tpucared down` (`now`): one `sweep(project, zone)` per
location, each within `deadline` (runtime/deadlines.py). A sweep never blocks a tick: its
task is spawned on the daemon's TaskSet; a failure is logged at warning (`sweep.failed`) and
the next confirmed delete (or start) sweeps again. A location whose sweep is still running
is not swept twice at once: it is swept once more when that sweep ends, since the running one
may have listed the location's groups before the delete that asked again was confirmed (a
policy or template it then saw in use would stay behind until the next delete there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

import structlog

from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import FleetSpec
from tpucared.core.nodes import sweep
from tpucared.core.vocab.plan import Plan
from tpucared.ports.cloud import CloudError, SharedResources
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.deadlines import SWEEP_DEADLINE_S, answered_within
from tpucared.runtime.tasks import TaskSet

log = structlog.get_logger(__name__)


class Sweeper:
    def __init__(
        self,
        clouds: CloudMap,
        project: str,
        tasks: TaskSet | None = None,
        *,
        deadline: float = SWEEP_DEADLINE_S,
    ) -> None:
        self._clouds = clouds
        self._project = project  # what the core's DEFAULT_PROJECT means: `gcp.project`
        self._tasks = tasks
        self.deadline = deadline
        self._running: set[sweep.Location] = set()
        self._again: set[sweep.Location] = set()  # asked for while running: once more after

    @property
    def apis(self) -> frozenset[str]:
        """The cloud APIs whose port has `SharedResources`."""
        return frozenset(
            api for api, cloud in self._clouds.clouds.items() if isinstance(cloud, SharedResources)
        )

    def after_plan(
        self, plan: Plan, nodes: Mapping[int, IncarnationRecord], specs: Iterable[FleetSpec]
    ) -> None:
        """Spawn the sweeps a tick's plan calls for (none, nearly always)."""
        apis = self.apis
        if apis:
            self._spawn(sweep.after_plan(plan, nodes, {s.name: s for s in specs}, apis))

    def at_start(self, specs: Iterable[FleetSpec], nodes: Iterable[IncarnationRecord]) -> None:
        apis = self.apis
        if apis:
            self._spawn(sweep.at_start(specs, nodes, apis))

    async def now(self, specs: Iterable[FleetSpec], nodes: Iterable[IncarnationRecord]) -> None:
        """Sweep every location `at_start` names and wait (the end of `tpucared down`)."""
        apis = self.apis
        if apis:
            places = sweep.at_start(specs, nodes, apis)
            await asyncio.gather(*(self._one(place) for place in places))

    def _spawn(self, places: Iterable[sweep.Location]) -> None:
        if self._tasks is None:
            return
        for place in places:
            if place in self._running:
                self._again.add(place)
                continue
            self._running.add(place)
            self._tasks.spawn(self._one(place), name=f"sweep {place[1] or 'default'}/{place[2]}")

    async def _one(self, place: sweep.Location) -> None:
        api, project, zone = place
        real = project or self._project
        try:
            cloud = self._clouds.clouds.get(api)
            if not isinstance(cloud, SharedResources):
                return
            what = f"sweep of {real}/{zone}"
            deleted = await answered_within(self.deadline, what, cloud.sweep(real, zone))
        except CloudError as exc:
            log.warning("sweep.failed", api=api, project=real, zone=zone, error=exc.message)
        else:
            if deleted:
                log.info("sweep.deleted", api=api, project=real, zone=zone, names=list(deleted))
        finally:
            self._running.discard(place)
            if place in self._again:
                self._again.discard(place)
                self._spawn([place])
