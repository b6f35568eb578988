"""Goodput per slot: the share of wall time the slot was doing useful work.

Productive time is time with a workload attempt running on the slot; for a fleet without a
workload (nodes kept for people to use), time with a READY node (for a multislice fleet,
every slice READY: its slices serve only together). The tracker samples the
store's snapshot once per tick and credits the time since the previous sample according to
the state seen at the previous sample, so its resolution is one tick. It counts from the
daemon's start; the database view `v_slot_goodput` (docs/inspecting.md) has the lifetime
figure. Slots that are done, and fleets that are down, stop accumulating: they want no node.

What it keeps, and why: for each slot, its totals at the sample where its state last changed
and the state since then (`_Account`), not the totals of every sample. Between two changes a
slot's time grows by the same elapsed time as every other slot in its state, so its figures
at the last sample are computed when asked (`times`, `get`: one subtraction) and a sample
rewrites only the slots whose state changed. A sample of the very snapshot the previous one
saw (the store returns the same object when nothing was written) rewrites nothing. At 10,000
slots rewriting every slot each tick, and pushing each into Prometheus, was a third of the
daemon's CPU (docs/benchmarks.md, "Scale").

Times are kept in integer microseconds (the resolution of `datetime`), so a total computed in
one subtraction is exactly the sum of the intervals it spans; the figures are the same
seconds as summing each interval's float seconds, without that sum's rounding drift.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from tpucared.core.model.records import FleetRecord, NodePhase
from tpucared.store.snapshot import SlotKey, Snapshot

_US = timedelta(microseconds=1)

# How a fleet's slots accrue: not at all (down, or unknown: it wants no node); productive
# while a workload attempt runs; productive while one runs or, with no workload configured,
# while the slot's node is READY. (An attempt running counts in a fleet without a workload
# too: one started before the workload was removed from the config.)
_STOPPED = "stopped"
_RUNNING_COUNTS = "running counts"
_READY_COUNTS = "ready counts"


@dataclass(frozen=True)
class SlotTime:
    wall_s: float  # seconds accounted since the daemon started (or the slot appeared)
    productive_s: float

    @property
    def ratio(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class _Account:
    """A slot's totals at `since` (the sample that last changed its state), and that state:
    `counted` (wall time accrues) and `productive` (productive time accrues too)."""

    wall_us: int
    productive_us: int
    since: datetime
    counted: bool
    productive: bool

    def at(self, when: datetime) -> tuple[int, int]:
        """(wall, productive) in microseconds at `when` (never before `since`)."""
        run = (when - self.since) // _US if self.counted else 0
        return self.wall_us + run, self.productive_us + (run if self.productive else 0)

    def moved_to(self, when: datetime, counted: bool, productive: bool) -> _Account:
        """Totals folded up to `when`, and from `when` on the given state."""
        wall, prod = self.at(when)
        return _Account(wall, prod, when, counted, productive)


class GoodputTracker:
    def __init__(self) -> None:
        self._at: datetime | None = None  # the last sample
        self._seen: Snapshot | None = None  # the snapshot that sample's states came from
        # Every slot of the last snapshot, in the order they first appeared (Prometheus shows
        # their series in that order); a slot that left is forgotten, so long runs do not
        # accumulate them, and one that comes back starts from zero.
        self._accounts: dict[SlotKey, _Account] = {}
        # (fleet, spec_hash) -> (has a workload, slices per slot), parsed once.
        self._shapes: dict[tuple[str, str], tuple[bool, int]] = {}

    def update(self, snapshot: Snapshot, now: datetime) -> set[SlotKey]:
        """Credit the time since the last update; afterwards `times` has every slot of the
        snapshot. Returns the slots whose account was rewritten: new, changed state, left,
        or all accruing ones when the clock went back."""
        touched: set[SlotKey] = set()
        if self._at is not None and now < self._at:
            # The clock stepped back: this interval credits nothing (a negative one would
            # make the counters go backwards), and the next counts from `now`.
            for key, acc in self._accounts.items():
                if acc.counted:
                    wall, productive = acc.at(self._at)
                    self._accounts[key] = _Account(wall, productive, now, True, acc.productive)
                    touched.add(key)
        self._at = now
        if snapshot is self._seen:
            return touched
        touched |= self._rescan(snapshot, now)
        self._seen = snapshot  # only once every state of it is in: a failed scan is redone
        return touched

    def _rescan(self, snapshot: Snapshot, now: datetime) -> set[SlotKey]:
        """Compare each slot's state with its account's; rewrite the ones that differ. The
        loop runs over every slot of a changed snapshot, so it is written for speed: what
        depends on the fleet only is worked out once per fleet."""
        touched: set[SlotKey] = set()
        accounts = self._accounts
        kinds = {name: self._kind(fleet) for name, fleet in snapshot.fleets.items()}
        slices = {name: self._shape(fleet)[1] for name, fleet in snapshot.fleets.items()}
        running, nodes, ready = snapshot.running, snapshot.nodes, NodePhase.READY
        for key, slot in snapshot.slots.items():
            kind = _STOPPED if slot.done else kinds.get(key[0], _STOPPED)
            if kind is _STOPPED:
                counted = productive = False
            elif key in running:
                counted = productive = True
            elif kind is _READY_COUNTS:
                counted, productive = True, True
                for index in range(slices[key[0]]):  # every slice READY
                    node = nodes.get((*key, index))
                    if node is None or node.phase is not ready:
                        productive = False
                        break
            else:
                counted, productive = True, False
            acc = accounts.get(key)
            if acc is None:
                accounts[key] = _Account(0, 0, now, counted, productive)
            elif acc.counted != counted or acc.productive != productive:
                accounts[key] = acc.moved_to(now, counted, productive)
            else:
                continue
            touched.add(key)
        if len(accounts) > len(snapshot.slots):  # some slots left the database
            for key in [k for k in accounts if k not in snapshot.slots]:
                del accounts[key]
                touched.add(key)
        return touched

    def times(self) -> Iterator[tuple[SlotKey, SlotTime]]:
        """Every slot's figures at the last update, in the order the slots first appeared."""
        at = self._at
        for key, acc in self._accounts.items():
            assert at is not None  # accounts exist only after an update
            yield key, _slot_time(acc, at)

    def __contains__(self, key: SlotKey) -> bool:
        return key in self._accounts

    def get(self, key: SlotKey) -> SlotTime | None:
        acc = self._accounts.get(key)
        return None if acc is None or self._at is None else _slot_time(acc, self._at)

    def _kind(self, fleet: FleetRecord) -> str:
        """How the slots of a fleet accrue (a slot that is done accrues nothing either)."""
        if fleet.down:
            return _STOPPED
        return _RUNNING_COUNTS if self._shape(fleet)[0] else _READY_COUNTS

    def _shape(self, fleet: FleetRecord) -> tuple[bool, int]:
        """(has a workload, slices per slot) of the fleet's stored spec."""
        cache_key = (fleet.name, fleet.spec_hash)
        if cache_key not in self._shapes:
            self._shapes[cache_key] = fleet_shape(fleet.spec_json)
        return self._shapes[cache_key]


def fleet_shape(spec_json: str) -> tuple[bool, int]:
    """(has a workload, slices per slot) from a fleet's stored spec (core.slots.spec_json,
    the FleetSpec as a dict); unreadable: a workload (an idle node is never called
    productive), one slice."""
    try:
        spec = json.loads(spec_json)
    except ValueError:
        return True, 1
    if not isinstance(spec, dict):
        return True, 1
    slices = spec.get("slices", 1)
    return spec.get("workload") is not None, slices if isinstance(slices, int) and slices > 0 else 1


def _slot_time(acc: _Account, at: datetime) -> SlotTime:
    wall, productive = acc.at(at)
    return SlotTime(wall / 1_000_000, productive / 1_000_000)
