"""When `tpucared down` is done: the rule its reconcile loop stops on (runtime/down.py).

`down` runs the daemon's loop over the fleets it marked down until nothing of theirs is left.
That is the case at a tick whose plan holds no action but notices (no delete or adoption
still to do), whose snapshot holds no live incarnation of those fleets, and whose lists of
every zone of theirs succeeded: a failed list hides nodes, so it never counts as empty.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.vocab.actions import Notice
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.snapshot import PlannerSnapshot

Location = tuple[str, str]  # (project, zone)


def down_finished(
    plan: Plan,
    snapshot: PlannerSnapshot,
    observations: Iterable[ZoneObservation],
    fleets: Collection[str],
    zones: Collection[Location],
) -> bool:
    """Nothing left to do for `fleets`: no action planned but notices, no live incarnation of
    theirs, and every one of their `zones` listed successfully at this tick."""
    if any(not isinstance(a, Notice) for a in plan.actions):
        return False
    if any(i.fleet in fleets for i in snapshot.nodes.values()):
        return False
    return all(o.ok for o in observations if (o.project, o.zone) in zones)
