"""`WaitingSlices`: when `ComputeCloud.poll` needs to read a flex-start slice that waits.

A flex-start slice's create ends when the cloud finds it capacity, which may take hours; its
poll reads the MIG (instanceGroupManagers.get + listManagedInstances, slices.py
`provisioning`), two requests each time the operation watcher asks (every 5 s at most).
Sixteen such slots waiting in one zone cost ~390 requests a minute (docs/benchmarks.md,
"Capacity: on Compute Engine"), above the per-zone budget docs/daemon.md states. Yet the zone's
one instanceGroupManagers.list per tick (observe.py) already describes every MIG of ours:
while a waiting slice's listed progress is what its last read saw, a read tells nothing new.

So a poll of a waiting flex-start slice reads only when
- a list of its zone made after its last read shows its progress moved (`progress_of`:
  `targetSize`, `currentActions`, `status.isStable` and `status.currentInstanceStatuses`,
  which change when a member is made or starts: the InstanceGroupManager resource's
  documented summaries; a MIG absent from that list has moved too: gone, the read says so), or
- `reread_s` (60 s) passed since its last read: a bound on what a list that says less than
  we assume (or a zone whose lists fail) can cost, one read a minute.
Otherwise the poll answers "running" without a request. A waiting slot then costs 2 requests a
minute instead of ~24, and its end is seen within a poll interval and one watcher poll of the
list that shows it (the create's capacity is taken by the cloud all the same: only the
daemon's noticing moves). Any other slice, and a flex-start one until its first read, is read
at every poll as before. Memory is per process: after a restart the first poll reads.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# The longest a waiting slice goes unread: what it costs when the zone's lists tell nothing.
REREAD_S = 60.0

Where = tuple[str, str]  # (project, zone)


def progress_of(mig: Mapping[str, Any]) -> str:
    """What moves when a MIG's members are made: its summaries, as one comparable text (the
    same from instanceGroupManagers.get as from the list's partial response, observe.py's
    MIG_LIST_FIELDS, which holds `targetSize`, `currentActions` and `status`)."""
    status = mig.get("status")
    status = status if isinstance(status, Mapping) else {}
    summary = [
        mig.get("targetSize"),
        mig.get("currentActions"),
        status.get("isStable"),
        status.get("currentInstanceStatuses"),
    ]
    return json.dumps(summary, sort_keys=True, default=str)


@dataclass(frozen=True)
class _Read:
    progress: str  # the MIG's progress at the read
    listing: int  # its zone's listings count at the read
    at: float  # monotonic time of the read


class WaitingSlices:
    def __init__(
        self, reread_s: float = REREAD_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._reread_s = reread_s
        self._clock = clock
        self._listings: dict[Where, int] = {}  # successful lists of the zone so far
        self._listed: dict[Where, dict[str, str]] = {}  # each MIG's progress at the last
        self._reads: dict[str, tuple[Where, str, _Read]] = {}  # operation -> its MIG's read

    def listed(self, where: Where, progress: Mapping[str, str]) -> None:
        """A successful list of the zone: our MIGs' progress (name -> `progress_of`)."""
        self._listings[where] = self._listings.get(where, 0) + 1
        self._listed[where] = dict(progress)
        for operation, (at, mig, _) in list(self._reads.items()):
            if at == where and mig not in progress:
                # Gone (or a create the watcher let go of): its next poll, if any, reads.
                del self._reads[operation]

    def read(self, operation: str, where: Where, mig: str, group: Mapping[str, Any]) -> None:
        """The slice was read and still waits: remember what the read saw."""
        seen = _Read(progress_of(group), self._listings.get(where, 0), self._clock())
        self._reads[operation] = (where, mig, seen)

    def forget(self, operation: str) -> None:
        self._reads.pop(operation, None)

    def unchanged(self, operation: str) -> bool:
        """True when a read of this waiting slice now would tell nothing new (see above)."""
        known = self._reads.get(operation)
        if known is None:
            return False
        where, mig, seen = known
        if self._clock() - seen.at >= self._reread_s:
            return False
        if self._listings.get(where, 0) <= seen.listing:
            return True  # no list since the read: nothing says it moved
        return self._listed.get(where, {}).get(mig) == seen.progress
