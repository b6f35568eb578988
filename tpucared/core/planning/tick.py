"""One tick's whole plan: the node planner's, then the workload planner's on top of it.

`plan_tick` is what the daemon calls each tick instead of `planner.plan` once workloads are
probed: it plans the nodes (core/planning/planner.py), derives the `NodesOutcome` from that plan
(the phase every live incarnation is left in), runs the workload sub-planner for every slot that
has a workload or a running attempt (core/workload/planner.py), and merges the two: node actions
first, then workload actions, then the notices of both (each told once, as `plan` does).

Why the workload planner is composed here rather than as one of `planner.LATER`: it needs
inputs `plan()` does not take (this tick's probes, workers, attempts) and it returns holds
too. `plan_workloads` takes a `NodesOutcome` all the same, so it can move into `LATER` if
`plan()` ever passes such inputs through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import FleetSpec
from tpucared.core.nodes import multislice
from tpucared.core.nodes.create_rate import NO_CREATES_SENT, CreatesSent
from tpucared.core.nodes.slots import NO_DELETES, DeletesInFlight
from tpucared.core.planning.planner import NodesOutcome, plan_view
from tpucared.core.view import View
from tpucared.core.vocab.actions import Action, Adopt, DeleteNode, Notice, Transition
from tpucared.core.vocab.plan import Hold, Plan
from tpucared.core.vocab.policy import Policy
from tpucared.core.vocab.snapshot import SlotKey
from tpucared.core.workload.gang import Gang
from tpucared.core.workload.inputs import SlotProbe, TickSnapshot, WorkloadRecords
from tpucared.core.workload.planner import SlotPlan, plan_slot
from tpucared.core.workload.slot_work import SlotWork, WorkloadPolicy


def plan_tick(
    specs: Sequence[FleetSpec],
    observations: Iterable[ZoneObservation],
    snapshot: TickSnapshot,
    probes: Mapping[SlotKey, SlotProbe],
    now: datetime,
    policy: Policy,
    owner: str,
    *,
    reported: frozenset[str] = frozenset(),
    workload_policy: WorkloadPolicy | None = None,
    deleting: DeletesInFlight = NO_DELETES,
    sent: CreatesSent = NO_CREATES_SENT,
) -> Plan:
    """`planner.plan` plus the workload actions for `probes` (tracked, see
    workload_inputs.track). With no probes, running attempts are left alone and nothing is
    launched, so `tpucared plan` may pass none."""
    view = View(specs, tuple(observations), snapshot, now, policy, owner)
    node_plan = plan_view(view, reported, deleting, sent)
    work = plan_workloads(
        view,
        nodes_outcome(view, node_plan.actions),
        snapshot,
        probes,
        workload_policy or WorkloadPolicy(),
    )
    merged = merge(node_plan, work, reported)
    # A preemption notice (workload) and the API's PREEMPTED (nodes) for one multislice slot
    # in one plan: still one preemption.
    return replace(merged, actions=tuple(multislice.count_once(view, merged.actions)))


def nodes_outcome(view: View, node_actions: Iterable[Action]) -> NodesOutcome:
    """The phase each live incarnation of a managed fleet is left in by `node_actions` (the
    same facts `planner.plan` hands its LATER sub-planners)."""
    phases: dict[int, NodePhase] = {
        inc.id: inc.phase for inc in view.live if view.managed(inc.fleet)
    }
    ready: set[int] = set()
    adopted: list[Adopt] = []
    for a in node_actions:
        if isinstance(a, Transition) and a.incarnation_id in phases:
            phases[a.incarnation_id] = a.new
            if a.new is NodePhase.READY:
                ready.add(a.incarnation_id)
        elif isinstance(a, DeleteNode) and a.incarnation_id in phases:
            phases[a.incarnation_id] = NodePhase.DELETING
        elif isinstance(a, Adopt):
            adopted.append(a)
    return NodesOutcome(phases=phases, became_ready=frozenset(ready), adopted=tuple(adopted))


def plan_workloads(
    view: View,
    outcome: NodesOutcome,
    records: WorkloadRecords,
    probes: Mapping[SlotKey, SlotProbe],
    policy: WorkloadPolicy,
) -> SlotPlan:
    """The workload sub-planner over every slot that has a workload or a running attempt,
    in config order (fleets, then slots); running attempts of fleets marked down come last.
    A fleet that is neither configured nor down is left alone, as the node planner leaves
    its nodes (an editing mistake in the config must not stop a pod's workload)."""
    keys: list[SlotKey] = []
    for spec in view.specs.values():
        if spec.workload is not None:
            keys += [(spec.name, i) for i in range(spec.size)]
    running = sorted(
        (k for k, a in records.last_attempts.items() if a.ended_at is None and view.managed(k[0])),
        key=lambda k: (view.order(k[0]), k[1]),
    )
    seen = set(keys)
    keys += [k for k in running if k not in seen]
    nodes: dict[SlotKey, list[IncarnationRecord]] = {}
    for i in view.live:
        nodes.setdefault((i.fleet, i.slot), []).append(i)
    out = SlotPlan()
    for fleet, index in keys:
        fleet_spec = view.specs.get(fleet)
        slices = nodes.get((fleet, index), [])
        gang = None
        if fleet_spec is not None and fleet_spec.multislice:
            gang = Gang(
                name=fleet_spec.slot_name(index),
                expected=fleet_spec.slices,
                slices=tuple(slices),
                phases_after=outcome.phases,
                workers={i.id: len(records.workers.get(i.id, ())) for i in slices},
            )
        node = gang.stand_in() if gang is not None else (slices[0] if slices else None)
        if gang is not None:
            phase_after, workers = gang.phase_after(), gang.worker_count()
        elif node is not None:
            phase_after = outcome.phases.get(node.id)
            workers = len(records.workers.get(node.id, ()))
        else:
            phase_after, workers = None, 0
        work = SlotWork(
            fleet=fleet,
            index=index,
            spec=fleet_spec.workload if fleet_spec is not None else None,
            slot=view.slots.get((fleet, index)),
            node=node,
            phase_after=phase_after,
            workers=workers,
            last=records.last_attempts.get((fleet, index)),
            probe=probes.get((fleet, index)),
            unwanted=view.unwanted(fleet, index),
            now=view.now,
            gang=gang,
            zones=tuple(fleet_spec.zones) if fleet_spec is not None else (),
        )
        one = plan_slot(work, policy)
        out.actions += one.actions
        out.holds += one.holds
    return out


def merge(node_plan: Plan, work: SlotPlan, reported: frozenset[str]) -> Plan:
    """Node actions, then workload actions, then every fresh notice sorted by key."""
    actions = [a for a in node_plan.actions if not isinstance(a, Notice)]
    notices = {a.key: a for a in node_plan.actions if isinstance(a, Notice)}
    standing = set(node_plan.standing)
    for a in work.actions:
        if isinstance(a, Notice):
            standing.add(a.key)
            if a.key not in reported:
                notices.setdefault(a.key, a)
        else:
            actions.append(a)
    holds: list[Hold] = [*node_plan.holds, *work.holds]
    return Plan(
        now=node_plan.now,
        actions=(*actions, *(notices[k] for k in sorted(notices))),
        holds=tuple(holds),
        standing=frozenset(standing),
    )
