"""The planner's read-only view of one tick: indexes over specs, records and observations.

`View` is built once per `plan()` call and shared by the sub-planners (core/nodes/incarnations.py,
core/nodes/strays.py, core/nodes/slots.py). It answers the questions they all ask: which zones were
listed successfully, what a list showed for one incarnation (a `Sighting`), which observed
resources no live incarnation accounts for, which slot a node name belongs to, and whether a
slot is still wanted. It makes no decisions, but it is code, not words: it sits beside
`vocab/` (which it reads: the snapshot and the policy) rather than in it, and below the
sub-planners of `nodes/`, `workload/` and `planning/`, which read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from tpucared.core.model.abilities import NO_ABILITIES, CloudAbilities
from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.observed import (
    LossRecords,
    ObservedNode,
    ObservedQueuedResource,
    ZoneObservation,
)
from tpucared.core.model.records import FleetRecord, IncarnationRecord, SlotRecord
from tpucared.core.model.specs import (
    DEFAULT_API,
    DEFAULT_PROJECT,
    FLEET_LABEL,
    OWNER_LABEL,
    FleetSpec,
    OnSuccess,
)
from tpucared.core.vocab.policy import Policy
from tpucared.core.vocab.snapshot import PlannerSnapshot

Location = tuple[str, str]  # (project, zone); DEFAULT_PROJECT for the daemon's own

_SLOT_SUFFIX = re.compile(r"-(0|[1-9][0-9]*)")
_SLICE_SUFFIX = re.compile(r"-(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")


def slot_of(fleet: str, node_name: str, *, multislice: bool = False) -> int | None:
    """The slot a node name denotes for `fleet` ("sweep-3" -> 3), or None. Names are
    `{fleet}-{slot}` with a canonical decimal slot, so no two (fleet, slot) share a name;
    a multislice fleet's are `{fleet}-{slot}-{slice}` (`slice_of`)."""
    found = slice_of(fleet, node_name, multislice=multislice)
    return found[0] if found is not None else None


def slice_of(fleet: str, node_name: str, *, multislice: bool) -> tuple[int, int] | None:
    """(slot, slice) a node name denotes for `fleet`: "sweep-3" -> (3, 0) for a single-slice
    fleet, "big-1-2" -> (1, 2) for a multislice one; None when it is not named so."""
    if not node_name.startswith(fleet):
        return None
    if multislice:
        m = _SLICE_SUFFIX.fullmatch(node_name, len(fleet))
        return (int(m.group(1)), int(m.group(2))) if m else None
    m = _SLOT_SUFFIX.fullmatch(node_name, len(fleet))
    return (int(m.group(1)), 0) if m else None


@dataclass(frozen=True)
class Sighting:
    """What this tick's lists showed for one incarnation. `known` is False when a list the
    incarnation depends on failed or was not taken: nothing may then be concluded from
    absence. `node`/`queued` are the matching resources, whatever their labels."""

    known: bool
    node: ObservedNode | None = None
    queued: ObservedQueuedResource | None = None

    @property
    def present(self) -> bool:
        return self.node is not None or self.queued is not None

    @property
    def gone(self) -> bool:
        return self.known and not self.present

    def labels(self) -> Mapping[str, str] | None:
        if self.node is not None:
            return self.node.labels
        if self.queued is not None:
            return self.queued.labels
        return None


@dataclass(frozen=True)
class Resource:
    """One name in one zone of one project as the lists showed it: a node, its queued
    resource, or both."""

    zone: str
    name: str
    node: ObservedNode | None
    queued: ObservedQueuedResource | None
    project: str = DEFAULT_PROJECT

    @property
    def labels(self) -> Mapping[str, str]:
        """The node's labels, else the queued resource's."""
        if self.node is not None:
            return self.node.labels
        assert self.queued is not None
        return self.queued.labels

    def _label_sets(self) -> list[Mapping[str, str]]:
        return [r.labels for r in (self.node, self.queued) if r is not None]

    def owned_by(self, owner: str) -> bool:
        """Ours only if every part (node and queued resource) carries our labels, for one
        and the same fleet."""
        sets = self._label_sets()
        return (
            all(s.get(OWNER_LABEL) == owner and s.get(FLEET_LABEL) for s in sets)
            and len({s.get(FLEET_LABEL) for s in sets}) == 1
        )

    @property
    def fleet(self) -> str | None:
        return self.labels.get(FLEET_LABEL)


class View:
    def __init__(
        self,
        specs: Sequence[FleetSpec],
        observations: Iterable[ZoneObservation],
        snapshot: PlannerSnapshot,
        now: datetime,
        policy: Policy,
        owner: str,
    ) -> None:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        self.now = now
        self.policy = policy
        self.owner = owner
        self.specs: dict[str, FleetSpec] = {s.name: s for s in specs}
        self.fleet_order: dict[str, int] = {s.name: i for i, s in enumerate(specs)}
        self.fleet_records: Mapping[str, FleetRecord] = snapshot.fleets
        self.slots: Mapping[tuple[str, int], SlotRecord] = snapshot.slots
        self.live: tuple[IncarnationRecord, ...] = tuple(
            sorted((i for i in snapshot.nodes.values() if i.phase in LIVE_PHASES), key=_inc_key)
        )
        self._index(observations)
        self._matched: set[tuple[str, str, str]] = set()
        self._sightings: dict[int, Sighting] = {}
        for inc in self.live:
            self._sightings[inc.id] = self._sight(inc)

    def _index(self, observations: Iterable[ZoneObservation]) -> None:
        """The lists by location: their nodes, queued resources, failures and records."""
        # Everything is keyed by location, (project, zone): two projects may share a zone,
        # and a node name is unique only within one of them.
        self._failed: set[Location] = set()
        self._queued_listed: set[Location] = set()
        self.errors: dict[Location, ZoneObservation] = {}
        # The cloud's records of the nodes lost there, where the runtime read them this tick
        # (core/nodes/preemption.py).
        self._loss_records: dict[Location, LossRecords] = {}
        nodes: dict[tuple[str, str, str], ObservedNode] = {}
        queued: dict[tuple[str, str, str], ObservedQueuedResource] = {}
        listed: set[Location] = set()
        # Nodes listed by another API than the TPU API's (only those: a big TPU fleet pays
        # nothing), for what a node nobody recorded is adopted as (core/nodes/strays.py).
        self._apis: dict[tuple[str, str, str], str] = {}
        # What each API's cloud can do, as stamped on its lists (core/model/abilities.py).
        self._abilities: dict[str, CloudAbilities] = {}
        # Several observations of one location are merged; one failure makes it unknown.
        for obs in sorted(observations, key=lambda o: (o.project, o.zone, o.observed_at)):
            where = (obs.project, obs.zone)
            if obs.abilities != NO_ABILITIES:  # a skipped location's says nothing
                self._abilities[obs.api] = obs.abilities
            if not obs.ok:
                self._failed.add(where)
                self.errors[where] = obs
                continue
            listed.add(where)
            if obs.loss_records is not None:
                self._loss_records[where] = obs.loss_records
            for n in obs.nodes:
                nodes[(*where, n.name)] = n
            if obs.api != DEFAULT_API:
                self._apis.update(dict.fromkeys(((*where, n.name) for n in obs.nodes), obs.api))
            if obs.queued_resources is not None:
                self._queued_listed.add(where)
                for q in obs.queued_resources:
                    queued[(*where, q.name)] = q
        self._listed = listed
        self._nodes = nodes
        self._queued = queued
        # Where nothing failed: the node lists, and the queued lists too (zone_known).
        self._known = listed - self._failed
        self._known_queued = self._known & self._queued_listed

    # -- zones ---------------------------------------------------------------------------

    def zone_known(self, project: str, zone: str, *, queued: bool = False) -> bool:
        """True when the zone's node list in `project` succeeded (and its queued list, if
        `queued`)."""
        return (project, zone) in (self._known_queued if queued else self._known)

    # -- incarnations --------------------------------------------------------------------

    def _sight(self, inc: IncarnationRecord) -> Sighting:
        needs_queued = inc.queued_resource is not None
        if (inc.project, inc.zone) not in (self._known_queued if needs_queued else self._known):
            return Sighting(known=False)
        key = (inc.project, inc.zone, inc.node_name)
        node = self._nodes.get(key)
        # A node with the same name but another id is a different node: ours is gone.
        if (
            node is not None
            and inc.cloud_id is not None
            and node.cloud_id is not None
            and node.cloud_id != inc.cloud_id
        ):
            node = None
        qr = None
        if inc.queued_resource is not None:
            qr = self._queued.get((inc.project, inc.zone, inc.queued_resource))
        if node is not None:
            self._matched.add(key)
        if qr is not None:
            self._matched.add((inc.project, inc.zone, qr.name))
        return Sighting(known=True, node=node, queued=qr)

    def sighting(self, inc: IncarnationRecord) -> Sighting:
        return self._sightings[inc.id]

    # -- unmatched resources -------------------------------------------------------------

    def strays(self) -> Iterator[Resource]:
        """Resources of successfully listed locations that no live incarnation accounts
        for, sorted by (project, zone, name)."""
        matched = self._matched
        # Nearly every listed resource is matched: pick out the rest before sorting.
        names = sorted(
            {k for k in self._nodes if k not in matched}
            | {k for k in self._queued if k not in matched}
        )
        for key in names:
            project, zone, name = key
            if (project, zone) in self._failed:
                continue
            yield Resource(zone, name, self._nodes.get(key), self._queued.get(key), project)

    def loss_records(self, project: str, zone: str) -> LossRecords | None:
        """The records read this tick for the nodes lost in `zone` of `project`, if any."""
        return self._loss_records.get((project, zone))

    def listed_node(self, project: str, zone: str, name: str) -> ObservedNode | None:
        """The node a successful list shows under `name` in `zone` of `project` (matched or
        not); a dict lookup, no allocation: asked for every live incarnation every tick."""
        return self._nodes.get((project, zone, name))

    def listed_api(self, project: str, zone: str, name: str) -> str:
        """The cloud API whose list showed node `name` (DEFAULT_API when none other did)."""
        return self._apis.get((project, zone, name), DEFAULT_API)

    def abilities(self, api: str) -> CloudAbilities:
        """What the cloud of `api` can do, as its lists said (none: no list of it this tick)."""
        return self._abilities.get(api, NO_ABILITIES)

    def occupant(self, project: str, zone: str, name: str) -> Resource | None:
        """Whatever the lists show under `name` in `zone` of `project` (matched or not)."""
        key = (project, zone, name)
        node = self._nodes.get(key)
        qr = self._queued.get(key)
        if node is None and qr is None:
            return None
        return Resource(zone, name, node, qr, project)

    # -- slots ---------------------------------------------------------------------------

    def slot(self, fleet: str, index: int) -> SlotRecord:
        """The slot's record, or a fresh one if the store has none yet."""
        return self.slots.get((fleet, index)) or SlotRecord(fleet=fleet, index=index, run_id="")

    def slice_of(self, fleet: str, node_name: str) -> tuple[int, int] | None:
        """(slot, slice) of a node name of `fleet`, as its spec names nodes; for a fleet no
        longer configured (down), either naming."""
        spec = self.specs.get(fleet)
        if spec is not None:
            return slice_of(fleet, node_name, multislice=spec.multislice)
        found = slice_of(fleet, node_name, multislice=True)
        return found if found is not None else slice_of(fleet, node_name, multislice=False)

    def managed(self, fleet: str) -> bool:
        """Fleets whose nodes the planner acts on: configured, or marked down."""
        if fleet in self.specs:
            return True
        rec = self.fleet_records.get(fleet)
        return rec is not None and rec.down

    def unwanted(self, fleet: str, index: int, slice_index: int = 0) -> str | None:
        """Why (fleet, slot, slice) should have no node, or None while it should have one."""
        rec = self.fleet_records.get(fleet)
        if rec is not None and rec.down:
            return f"fleet {fleet} is down"
        spec = self.specs.get(fleet)
        if spec is None:
            return f"fleet {fleet} is not in the config"
        if index >= spec.size:
            return f"scaled down: fleet {fleet} has size {spec.size}"
        if slice_index >= spec.slices:
            return f"fewer slices: fleet {fleet} has {spec.slices} slice(s) per slot"
        slot = self.slots.get((fleet, index))
        if slot is not None and slot.done:
            workload = spec.workload
            if workload is None or workload.on_success is OnSuccess.DELETE:
                return "workload finished (on_success = delete)"
        return None

    def order(self, fleet: str) -> int:
        return self.fleet_order.get(fleet, len(self.fleet_order))


def _inc_key(inc: IncarnationRecord) -> tuple[str, int, int, int]:
    return (inc.fleet, inc.slot, inc.slice, inc.id)
