"""The strays sub-planner: listed resources that no live incarnation accounts for.

After a crash between a create call and its record, after a lost database, or when people
create nodes by hand, the lists show nodes and queued resources we have no record of.
Rules (ownership = both contract labels, `tpucared-owner` equal to our owner id):
- ours, of a managed fleet, named `{fleet}-{slot}` (`{fleet}-{slot}-{slice}` for a multislice
  fleet; a multislice queued resource `{fleet}-{slot}` is adopted through its nodes, or as
  slice 0 while it has none) -> Adopt: record an incarnation in the
  phase its state implies; as DEAD if the slot is no longer wanted, so that the node
  sub-planner deletes it at the next tick. If the slot already has a live incarnation (in
  another zone: a lost or restored database), it is left alone with a notice until that
  one is gone (the store holds one live incarnation per slot), then adopted.
- ours, of a fleet that is neither configured nor marked down -> never touched; one notice
  (an editing mistake in the config must not wipe a pod).
- ours but named unlike any slot -> never touched; one notice.
- not ours, under the name of a configured slot in one of its zones -> never touched; one
  notice (the slot creates in another zone, or waits: see core/nodes/slots.py).
- anything else is someone else's business and ignored.
Incarnations still recorded for unmanaged fleets are covered by the same notice and are
left alone as well.
"""

from __future__ import annotations

from datetime import datetime

from tpucared.core.model.lifecycle import SERVING_PHASES
from tpucared.core.model.observed import QueuedPhase, StateClass
from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL
from tpucared.core.nodes.cloud import (
    is_unhealthy,
    queued_pseudo_state,
    unrecognized_notice,
)
from tpucared.core.view import Resource, View, slice_of, slot_of
from tpucared.core.vocab.actions import Action, Adopt, CloudFacts, Notice, Severity
from tpucared.core.vocab.snapshot import NodeKey

P = NodePhase
SERVING = SERVING_PHASES
_NAMES_SHOWN = 5


def plan_strays(view: View, occupied: set[NodeKey]) -> list[Action]:
    """Adopts and notices for unmatched resources. `occupied` holds the (fleet, slot, slice)
    keys that keep an incarnation in a live phase once this plan is applied; adopts are
    added."""
    actions: list[Action] = []
    unmanaged: dict[str, list[str]] = {}
    for inc in view.live:
        if not view.managed(inc.fleet):
            unmanaged.setdefault(inc.fleet, []).append(f"{inc.zone}/{inc.node_name}")
    for r in view.strays():
        fleet = r.fleet
        if r.owned_by(view.owner) and fleet is not None:
            action = _our_stray(view, r, fleet, occupied, unmanaged)
        else:
            action = _foreign_stray(view, r)
        if action is not None:
            actions.append(action)
    for fleet, names in sorted(unmanaged.items()):
        actions.append(_unmanaged_notice(fleet, names))
    return actions


def _our_stray(
    view: View,
    r: Resource,
    fleet: str,
    occupied: set[NodeKey],
    unmanaged: dict[str, list[str]],
) -> Action | None:
    """A stray with our labels: adopted into its slot, or left alone (with a notice, or in
    `unmanaged` for one notice per fleet)."""
    if not view.managed(fleet):
        unmanaged.setdefault(fleet, []).append(f"{r.zone}/{r.name}")
        return None
    found = view.slice_of(fleet, r.name)
    name = r.name
    if found is None and (qr := _multislice_queued(view, r, fleet)) is not None:
        if qr[1] is None:
            return None  # its nodes are listed: they are adopted, and it with them
        found, name = (qr[0], 0), qr[1]
    if found is None:
        return Notice(
            key=f"badname/{r.zone}/{r.name}",
            severity=Severity.WARNING,
            fleet=fleet,
            node=r.name,
            reason=f"{r.zone}/{r.name} carries our labels for fleet {fleet} but "
            f"is not named {fleet}-<slot>: left alone",
        )
    slot, piece = found
    if (fleet, slot, piece) in occupied:
        return Notice(
            key=f"duplicate/{r.zone}/{r.name}",
            severity=Severity.WARNING,
            fleet=fleet,
            node=r.name,
            reason=f"{r.name} in {r.zone} carries our labels but slot {slot} of "
            f"{fleet} already has a node: left alone until that one is gone",
        )
    occupied.add((fleet, slot, piece))
    if r.node is not None and r.node.state_class is StateClass.UNREADABLE:
        # Neither adopted nor replaced while its state cannot be read: the slot stays
        # occupied (no second node is created beside it) and a person is told.
        return unrecognized_notice(r.node, fleet)
    return _adopt(view, r, fleet, (slot, piece), name)


def _multislice_queued(view: View, r: Resource, fleet: str) -> tuple[int, str | None] | None:
    """For a queued resource of a multislice fleet, named `{fleet}-{slot}`: its slot, and the
    name to adopt it under as slice 0 while none of its nodes is listed (None when one is:
    the nodes are adopted, each with the queued resource). None for anything else."""
    spec = view.specs.get(fleet)
    if r.node is not None or r.queued is None or spec is None or not spec.multislice:
        return None
    found = slice_of(fleet, r.name, multislice=False)
    if found is None:
        return None
    slot = found[0]
    names = [spec.node_name(slot, i) for i in range(spec.slices)]
    if any(view.occupant(r.project, r.zone, n) is not None for n in names):
        return slot, None
    return slot, names[0]


def _foreign_stray(view: View, r: Resource) -> Notice | None:
    """A stray without our labels: a notice if it holds the name of one of our slots."""
    hit = _collision(view, r)
    if hit is None:
        return None
    labels = r.labels
    who = ", ".join(f"{k}={labels.get(k) or '-'}" for k in (FLEET_LABEL, OWNER_LABEL))
    return Notice(
        key=f"foreign/{r.zone}/{r.name}",
        severity=Severity.WARNING,
        fleet=hit,
        node=r.name,
        reason=f"{r.name} in {r.zone} is listed without our labels ({who}): "
        f"tpucared will not touch it; delete or rename it to free the name",
    )


def _unmanaged_notice(fleet: str, names: list[str]) -> Notice:
    shown = ", ".join(sorted(names)[:_NAMES_SHOWN])
    more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    return Notice(
        key=f"unmanaged/{fleet}",
        severity=Severity.WARNING,
        fleet=fleet,
        reason=f"fleet {fleet} is not in the config but owns {len(names)} node(s) "
        f"({shown}{more}): left alone; add it back with size = 0, or run "
        f"`tpucared down` for it, to delete them",
    )


def _adopt(view: View, r: Resource, fleet: str, where: tuple[int, int], name: str) -> Adopt:
    slot, piece = where
    phase, end_reason = _phase_of(r)
    why = f"listed with our labels but not recorded; adopting it as {phase.value}"
    unwanted = view.unwanted(fleet, slot, piece)
    if phase in SERVING and unwanted is not None:
        phase, end_reason = P.DEAD, unwanted
        why = f"listed with our labels but {unwanted}; adopting it to delete it"
    spec = view.specs.get(fleet)
    accelerator = r.node.accelerator_type if r.node is not None else ""
    if not accelerator and spec is not None:
        accelerator = spec.accelerator_type
    queued = r.queued.name if r.queued is not None else None
    if queued is None and r.node is not None and r.node.queued_resource:
        queued = r.node.queued_resource.rsplit("/", 1)[-1]
    return Adopt(
        fleet=fleet,
        slot=slot,
        slice=piece,
        node_name=name,
        zone=r.zone,
        accelerator_type=accelerator,
        phase=phase,
        queued_resource=queued,
        cloud=_facts(r, view.now),
        end_reason=end_reason,
        reason=why,
        project=r.project,
        api=view.listed_api(r.project, r.zone, name),
    )


def _phase_of(r: Resource) -> tuple[NodePhase, str | None]:
    """The phase an adopted resource starts in (a legal edge from REQUESTED)."""
    node, qr = r.node, r.queued
    if qr is not None and qr.phase is QueuedPhase.DEAD:
        return P.DEAD, f"queued resource {qr.state}"
    if node is not None:
        if node.state_class is StateClass.DEAD:
            return P.DEAD, node.state.lower()
        if node.state_class is StateClass.DELETING:
            return P.DELETING, "deleted outside tpucared"
        if node.state_class is StateClass.CREATING:
            return P.CREATING, None
        # USABLE, or a transient state of a node that was usable: timed from now on.
        return P.READY, None
    assert qr is not None
    if qr.phase is QueuedPhase.DELETING:
        return P.DELETING, "deleted outside tpucared"
    return P.CREATING, None


def _facts(r: Resource, now: datetime) -> CloudFacts:
    if r.node is not None:
        n = r.node
        return CloudFacts(
            cloud_state=str(n.state),
            cloud_state_since=now,
            health=n.health,
            unhealthy_since=now if is_unhealthy(n.health) else None,
            cloud_id=n.cloud_id,
            create_time=n.create_time,
            endpoints=n.endpoints,
            run_ends_at=n.run_ends_at,
            maintenance=n.maintenance,
        )
    assert r.queued is not None
    return CloudFacts(
        cloud_state=queued_pseudo_state(r.queued.state),
        cloud_state_since=now,
        health=None,
        unhealthy_since=None,
        cloud_id=None,
        create_time=None,
    )


def _collision(view: View, r: Resource) -> str | None:
    """The configured fleet whose slot name this resource holds in one of its zones."""
    for spec in view.specs.values():
        slot = slot_of(spec.name, r.name, multislice=spec.multislice)
        if slot is not None and slot < spec.size and r.zone in spec.zones:
            return spec.name
    return None
