"""The planner: (fleet specs, zone observations, stored snapshot, now, policy, owner) -> Plan.

A pure function, the heart of tpucared. The runtime calls it once per tick after observing
every zone (one paginated list per project and zone) and loading the store snapshot; it
executes the returned actions in order (core/vocab/actions.py has the executor's contract).
`tpucared plan` calls it too and prints `Plan.render()`, changing nothing.

It composes sub-planners over one shared `View` (core/view.py), each seeing what the
previous ones decided:
1. core/nodes/slots.py `fleet_records`: fleet and slot records for the config;
2. core/nodes/incarnations.py: each live incarnation of a managed fleet along its lifecycle;
3. core/nodes/strays.py: listed resources nobody accounts for (adopt, or tell a person);
4. core/nodes/slots.py `plan_creates`: creates for empty wanted slots (and slices), then
   core/nodes/multislice.py: multislice slots held, released, their preemptions counted once;
5. the `LATER` sub-planners, fed a `NodesOutcome` (e.g. the workload planner: a Transition
   to READY in this plan, or an incarnation READY in the outcome, is its cue to launch);
6. notices about zones that cannot be listed and fleets whose nodes differ from the spec
   (accelerator type here, node options in `drift.py`).
Notices whose key is in `reported` were told before and are dropped. A create or delete of a
name a delete still in flight may reach (`deleting`, from the runtime) waits, as a Hold
(core/nodes/slots.py `delete_in_flight`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import ErrorKind, FleetSpec, NodeOptions, error_text
from tpucared.core.model.specs import location_name as where
from tpucared.core.nodes import multislice
from tpucared.core.nodes.create_rate import NO_CREATES_SENT, CreatesSent
from tpucared.core.nodes.incarnations import SERVING, plan_incarnation
from tpucared.core.nodes.slots import (
    NO_DELETES,
    DeletesInFlight,
    delete_in_flight,
    fleet_records,
    plan_creates,
    updated_slots,
)
from tpucared.core.nodes.strays import plan_strays
from tpucared.core.planning import drift
from tpucared.core.view import View
from tpucared.core.vocab.actions import (
    Action,
    Adopt,
    DeleteNode,
    Notice,
    Severity,
    Transition,
)
from tpucared.core.vocab.plan import Hold, Plan
from tpucared.core.vocab.policy import HARD_ERRORS, Policy
from tpucared.core.vocab.snapshot import NodeKey, PlannerSnapshot

P = NodePhase
NO_OPTIONS = NodeOptions()


@dataclass(frozen=True)
class NodesOutcome:
    """What the node-level sub-planners leave behind, for the sub-planners that follow."""

    phases: Mapping[int, NodePhase]  # live incarnation id -> its phase after this plan
    became_ready: frozenset[int]  # incarnations this plan moves to READY
    adopted: tuple[Adopt, ...]  # incarnations this plan records (they have no id yet)


SubPlanner = Callable[[View, NodesOutcome], Iterable[Action]]

# Sub-planners that run after the node-level ones (the workload planner goes here).
LATER: tuple[SubPlanner, ...] = ()


def plan(
    specs: Sequence[FleetSpec],
    observations: Iterable[ZoneObservation],
    snapshot: PlannerSnapshot,
    now: datetime,
    policy: Policy,
    owner: str,
    *,
    reported: frozenset[str] = frozenset(),
    deleting: DeletesInFlight = NO_DELETES,
    sent: CreatesSent = NO_CREATES_SENT,
) -> Plan:
    """Everything to do at `now`. `reported`: notice keys told before (the previous plan's
    `standing`); their notices are left out. `deleting`: the deletes the runtime has in
    flight (core/nodes/slots.py `DeletesInFlight`); `sent`: when it sent the creates of the
    last minute (core/nodes/create_rate.py)."""
    view = View(specs, tuple(observations), snapshot, now, policy, owner)
    return plan_view(view, reported, deleting, sent)


def plan_view(
    view: View,
    reported: frozenset[str] = frozenset(),
    deleting: DeletesInFlight = NO_DELETES,
    sent: CreatesSent = NO_CREATES_SENT,
) -> Plan:
    """`plan` for a `View` already built: the workload planner reads the same view, and at
    10,000 nodes building it is as costly as the node rules that follow (bench/scale.py)."""
    now = view.now
    records = fleet_records(view)

    node_actions, phases = _incarnations(view)
    occupied = {i.key for i in view.live if phases.get(i.id, i.phase) in LIVE_PHASES}
    strays = plan_strays(view, occupied)
    adopts = [a for a in strays if isinstance(a, Adopt)]

    claimed, busy, in_flight = _slot_states(view, phases, adopts)
    flat_nodes = [a for _, acts in node_actions for a in acts]
    slots = updated_slots(view, flat_nodes)
    creates, holds = plan_creates(view, claimed, busy, in_flight, slots, deleting, sent)
    held, slice_holds = multislice.plan_holds(view, phases)
    holds += slice_holds

    outcome = NodesOutcome(
        phases=phases,
        became_ready=frozenset(
            a.incarnation_id for a in flat_nodes if isinstance(a, Transition) and a.new is P.READY
        ),
        adopted=tuple(adopts),
    )
    later = [a for sub in LATER for a in sub(view, outcome)]

    everything = multislice.count_once(
        view, [*records, *flat_nodes, *strays, *creates, *held, *later, *_notices(view)]
    )
    notices: dict[str, Notice] = {}
    actions: list[Action] = []
    for item in everything:
        if isinstance(item, Notice):
            notices.setdefault(item.key, item)
        else:
            actions.append(item)
    fresh = [n for key, n in sorted(notices.items()) if key not in reported]
    if deleting:
        actions = _hold_deletes(actions, deleting, holds)
    return Plan(
        now=now,
        actions=(*actions, *fresh),
        holds=tuple(holds),
        standing=frozenset(notices),
    )


def _hold_deletes(
    actions: list[Action], deleting: DeletesInFlight, holds: list[Hold]
) -> list[Action]:
    """`actions` without the deletes that must wait for another's (each added to `holds`)."""
    kept: list[Action] = []
    for a in actions:
        waits = delete_in_flight(a, deleting) if isinstance(a, DeleteNode) else None
        if waits is None:
            kept.append(a)
            continue
        assert isinstance(a, DeleteNode)
        holds.append(
            Hold(fleet=a.fleet, slot=a.slot, node_name=a.node_name, reason=waits, on_delete=True)
        )
    return kept


def _incarnations(
    view: View,
) -> tuple[list[tuple[tuple[int, int, int], list[Action]]], dict[int, NodePhase]]:
    """Each managed live incarnation's actions (in the plan's order: fleets in config order,
    scale-down's highest slots first) and the phase they leave it in."""
    node_actions: list[tuple[tuple[int, int, int], list[Action]]] = []
    phases: dict[int, NodePhase] = {}
    for inc in view.live:
        if not view.managed(inc.fleet):
            continue  # left alone; core/nodes/strays.py tells a person
        acts, phase = plan_incarnation(view, inc)
        phases[inc.id] = phase
        if acts:  # most incarnations have none: nothing to order
            node_actions.append(((view.order(inc.fleet), -inc.slot, inc.id), acts))
    node_actions.sort(key=lambda item: item[0])
    return node_actions, phases


def _slot_states(
    view: View, phases: Mapping[int, NodePhase], adopts: Iterable[Adopt]
) -> tuple[dict[NodeKey, str], dict[NodeKey, str], Counter[str]]:
    """What the create pass needs once node actions and adopts are applied: slices with a
    node wanted or coming (claimed, with its zone), slices whose old node still holds the
    name (busy, with its phase), and creates in flight per fleet (counted towards the
    limits)."""
    claimed: dict[NodeKey, str] = {}
    busy: dict[NodeKey, str] = {}
    in_flight: Counter[str] = Counter()
    after = [(i.key, i.zone, phases[i.id], i.queued_resource) for i in view.live if i.id in phases]
    after += [((a.fleet, a.slot, a.slice), a.zone, a.phase, a.queued_resource) for a in adopts]
    for key, zone, phase, queued in after:
        if phase in SERVING:
            claimed[key] = zone
            # A queued resource counts while its create call is in flight, then waits freely.
            if phase is P.REQUESTED or (phase is P.CREATING and queued is None):
                in_flight[key[0]] += 1
        elif phase in (P.DEAD, P.DELETING):
            busy[key] = phase.value
    return claimed, busy, in_flight


def _notices(view: View) -> list[Notice]:
    out: list[Notice] = []
    locations = sorted({(s.project, z) for s in view.specs.values() for z in s.zones})
    for project, zone in locations:
        obs = view.errors.get((project, zone))
        # A hard error needs a person; an answer we could not read may too (a proxy, an API
        # change): both are told. Transient failures clear by themselves and are not.
        if obs is not None and (obs.error in HARD_ERRORS or obs.error is ErrorKind.MALFORMED):
            assert obs.error is not None
            why = error_text(obs.error, obs.error_message)  # the kind said once
            out.append(
                Notice(
                    key=f"zone-error/{where(project, zone)}/{obs.error.value}",
                    severity=Severity.ERROR,
                    reason=f"listing {where(project, zone)} fails ({why}); its nodes are "
                    "unknown and left as they are until it works",
                )
            )
    # Accelerator types serving in each fleet other than the one it asks for: one pass.
    drifted: dict[str, set[str]] = {}
    for i in view.live:
        asked = view.specs.get(i.fleet)
        kind = i.accelerator_type
        if asked is not None and kind and kind != asked.accelerator_type and i.phase in SERVING:
            drifted.setdefault(i.fleet, set()).add(kind)
    for spec in view.specs.values():
        other = sorted(drifted.get(spec.name, ()))
        if other:
            out.append(
                Notice(
                    key=f"drift/{spec.name}/{spec.accelerator_type}",
                    severity=Severity.INFO,
                    fleet=spec.name,
                    reason=f"fleet {spec.name} asks for {spec.accelerator_type} but runs "
                    f"{', '.join(other)}: those nodes are replaced only when they die",
                )
            )
        out.extend(_option_drift(view, spec))
    return out


def _option_drift(view: View, spec: FleetSpec) -> list[Notice]:
    """One notice per fleet whose serving nodes were made with other node options."""
    if spec.node == NO_OPTIONS or not drift.compared(spec.node):
        return []
    found: list[str] = []
    # This fleet's serving nodes only, then sorted: not every live node once per fleet.
    mine = [i for i in view.live if i.fleet == spec.name and i.phase in SERVING]
    for inc in sorted(mine, key=lambda i: i.node_name):
        node = view.listed_node(inc.project, inc.zone, inc.node_name)
        if node is not None and node.made is not None:
            found.extend(f"{inc.node_name} {d}" for d in drift.differences(spec.node, node.made))
    if not found:
        return []
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return [
        Notice(
            key=f"drift/{spec.name}/options/{spec.spec_hash()}",
            severity=Severity.INFO,
            fleet=spec.name,
            reason=f"fleet {spec.name}'s nodes differ from its spec: "
            f"{'; '.join(found[:3])}{more}: those nodes are replaced only when they die",
        )
    ]
