"""A multislice slot's slices, as the workload rules see them: one node.

Where it sits: `plan_workloads` (core/planning/tick.py) builds a `Gang` for every slot of a
fleet with `slices > 1` and hands the workload planner (core/workload/planner.py) its
`stand_in()`: an IncarnationRecord that stands for all the slices at once, so that the rules
written for one node (judge.py, planner.py) hold for N slices unchanged:

- its `id` is the newest slice's incarnation id. Ids only grow, so replacing any slice
  changes it: an attempt recorded on one set of slices (`attempt.incarnation_id`) is never
  judged on, resumed on or probed as another set;
- it is READY only when every slice is READY (before and after this tick's node actions):
  the workload launches all-or-nothing, and a slice that dies, is deleted or goes missing
  ends the attempt on every slice (`stop` when others still run: `survivors`);
- its workers are every slice's, numbered slice by slice (`locate` maps a gang worker back
  to its slice and the slice's own worker index), as the runtime's probe reports them.

The actions that must name one real node (a notice's lost node, a replacement for a busy or
unreachable worker) go to the slices that hold the workers concerned (`slices_of`).

The runtime applies the same rule from the live incarnations alone (`whole`, `newest`): the
workload is probed (runtime/workload/runner.py) and launched (runtime/workload/executor.py) only
on a whole slot, and a launch planned for one set of slices is never carried out on another
(`acting_on`: which slices a launch or a stop acts on; `all_or_none`: a launch that cannot
reach every one of them reaches none; `probe_target`: what a slot's probe is at).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from tpucared.core.model.records import IncarnationRecord, NodePhase, WorkloadAttemptRecord

P = NodePhase
T = TypeVar("T")


@dataclass(frozen=True)
class Gang:
    name: str  # the slot's name, `{fleet}-{slot}`
    expected: int  # slices the fleet asks for
    slices: tuple[IncarnationRecord, ...]  # the slot's live incarnations, by slice
    phases_after: Mapping[int, NodePhase]  # incarnation id -> phase after this tick's actions
    workers: Mapping[int, int]  # incarnation id -> workers recorded

    @property
    def complete(self) -> bool:
        """Every slice present and READY now and after this tick's node actions."""
        return whole(self.slices, self.expected) is not None and all(
            self.phases_after.get(i.id) is P.READY for i in self.slices
        )

    def stand_in(self) -> IncarnationRecord | None:
        """One record for the whole slot (the module docstring), None with no slice live."""
        if not self.slices:
            return None
        not_ready = [i.phase for i in self.slices if i.phase is not P.READY]
        phase = not_ready[0] if not_ready else P.READY
        if len({i.slice for i in self.slices}) < self.expected and phase is P.READY:
            phase = P.CREATING  # a slice is missing: not usable as a whole
        return replace(newest(self.slices), node_name=self.name, phase=phase, slice=0)

    def phase_after(self) -> NodePhase | None:
        """The stand-in's phase after this tick's actions: READY only when `complete`."""
        if not self.slices:
            return None
        if self.complete:
            return P.READY
        after = [self.phases_after.get(i.id, i.phase) for i in self.slices]
        for phase in (P.DEAD, P.DELETING):  # the news first: a slice is going
            if phase in after:
                return phase
        return P.CREATING

    def worker_count(self) -> int:
        return sum(self.workers.get(i.id, 0) for i in self.slices)

    def locate(self, worker: int) -> tuple[IncarnationRecord, int] | None:
        """The slice holding gang worker `worker`, and its index there."""
        offset = 0
        for inc in sorted(self.slices, key=lambda i: i.slice):
            count = self.workers.get(inc.id, 0)
            if worker < offset + count:
                return inc, worker - offset
            offset += count
        return None

    def slices_of(self, workers: Iterable[int]) -> list[IncarnationRecord]:
        """The slices holding these gang workers, by slice; every slice when none is known."""
        found: dict[int, IncarnationRecord] = {}
        for worker in workers:
            hit = self.locate(worker)
            if hit is not None:
                found[hit[0].id] = hit[0]
        return sorted(found.values() or self.slices, key=lambda i: i.slice)

    def survivors(self) -> list[IncarnationRecord]:
        """Slices still READY after this tick's actions: where a broken attempt may still run."""
        return [i for i in self.slices if self.phases_after.get(i.id, i.phase) is P.READY]

    def ran(self, attempt: WorkloadAttemptRecord) -> bool:
        """Whether `attempt` may have run on a slice still here (READY before it started):
        its processes must be cleaned up before the next attempt."""
        return attempt.incarnation_id in {i.id for i in self.slices} or any(
            i.ready_at is not None and i.ready_at <= attempt.started_at for i in self.slices
        )


def whole(
    members: Iterable[IncarnationRecord], expected: int
) -> tuple[IncarnationRecord, ...] | None:
    """A slot's live incarnations, by slice, when they make the whole slot: `expected` of
    them, one per slice, every one READY (the workload runs on all or none). None otherwise:
    a slice missing, not READY yet, or going."""
    slices = tuple(sorted(members, key=lambda i: i.slice))
    if len(slices) != expected or len({i.slice for i in slices}) != expected:
        return None
    if any(i.phase is not P.READY for i in slices):
        return None
    return slices


def newest(slices: Iterable[IncarnationRecord]) -> IncarnationRecord:
    """The slice whose id the stand-in carries: the newest (ids only grow, so replacing any
    slice changes it, and an attempt recorded on one set of slices names that set)."""
    return max(slices, key=lambda i: i.id)


def by_slot(nodes: Iterable[IncarnationRecord]) -> dict[tuple[str, int], list[IncarnationRecord]]:
    """Live incarnations grouped by slot, each slot's by slice."""
    out: dict[tuple[str, int], list[IncarnationRecord]] = {}
    for inc in sorted(nodes, key=lambda i: i.key):
        out.setdefault((inc.fleet, inc.slot), []).append(inc)
    return out


def slot_node(members: list[IncarnationRecord]) -> IncarnationRecord | None:
    """The node a slot's workload is on, from its live incarnations alone: the one node, or
    for several slices the newest's id, READY only when all are (what `Gang.stand_in` gives
    for a complete gang; the runtime checks probes against it)."""
    if len(members) <= 1:
        return members[0] if members else None
    if all(i.phase is P.READY for i in members):
        return newest(members)
    return next(i for i in members if i.phase is not P.READY)


def acting_on(
    live: Iterable[IncarnationRecord], incarnation_id: int, expected: int, *, launch: bool
) -> list[IncarnationRecord]:
    """The slices a workload action planned on stand-in `incarnation_id` acts on, by slice,
    from the slot's live incarnations now: those READY; for a launch, only a whole slot
    (`whole`) whose stand-in is still `incarnation_id` (a slice replaced since the plan:
    none, the next tick plans again). A stop reaches whatever still runs."""
    members = list(live)
    if launch:
        slices = whole(members, expected)
        if slices is None or newest(slices).id != incarnation_id:
            return []
    return sorted((i for i in members if i.phase is P.READY), key=lambda i: i.slice)


def all_or_none(
    slices: Sequence[IncarnationRecord], reached: Mapping[int, T], *, launch: bool
) -> list[T]:
    """What `reached` holds for `slices` (by incarnation id, those the runtime could locate
    workers on), in their order: a launch all or none (a job on some slices only would wait
    for the others forever), a stop every slice reached."""
    if launch and any(i.id not in reached for i in slices):
        return []
    return [reached[i.id] for i in slices if i.id in reached]


@dataclass(frozen=True)
class ProbeTarget:
    """What a slot's probe is at (runtime/workload/runner.py makes its `ProbeJob` of it)."""

    node: IncarnationRecord  # the slot's node as the rules see it: the one, or the stand-in
    slices: tuple[IncarnationRecord, ...]  # the READY slices probed, by slice
    attempt: int | None  # the slot's newest attempt's number when it was made on `node`


def probe_target(
    name: str,
    live: Iterable[IncarnationRecord],
    expected: int,
    with_workers: Collection[int],
    last: WorkloadAttemptRecord | None,
) -> ProbeTarget | None:
    """What slot `name`'s probe is at: its live incarnations when they make the whole slot
    (`whole`) and each has workers recorded (ids in `with_workers`), its node the one node
    or the gang's stand-in (the newest slice's id: an attempt on an older set of slices is
    not this node's), and `last`'s number when `last` was made on that node. None: nothing
    to probe yet."""
    ready = whole(live, expected)
    if ready is None or any(i.id not in with_workers for i in ready):
        return None
    node = ready[0]
    if expected > 1:
        gang = Gang(name, expected, ready, {i.id: i.phase for i in ready}, {})
        node = gang.stand_in() or node
    on_node = last is not None and last.incarnation_id == node.id
    return ProbeTarget(node, ready, last.number if last is not None and on_node else None)
