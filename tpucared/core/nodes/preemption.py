"""A preemption, not a failure: how a lost node's end is worded where its state does not say.

A TPU API node says PREEMPTED itself. A Compute Engine spot VM does not: preempted with
`instanceTerminationAction: STOP` it turns TERMINATED (STOPPING first), with DELETE it simply
vanishes, and the evidence that it was preempted is a zone operation of type
`compute.instances.preempted` naming it (docs/research/compute-engine.md §4.3). So, for a
cloud whose adapter says it keeps such records (`CloudAbilities.preemption_records`, their
name: core/model/abilities.py, stamped on its lists), the records are part of the tick's
observation and the core plans each loss once, with them:

1. `suspects` (pure, from the lists and the store's live nodes) names the serving nodes the
   planner will find lost this tick: READY, of a cloud keeping records, in a location listed
   well, and dead there or gone from the list past `vanish_grace` (what incarnations.py
   `_ready` ends with `die(..., lost=True)`). A tick without one reads nothing.
2. The runtime reads the records of their locations once (the optional port method
   `PreemptionRecords.preemptions`, ports/cloud.py) and puts them in the locations'
   observations (`with_records`: `ZoneObservation.loss_records`).
3. `die` (core/nodes/step.py) words the Transition that ends such a node by them
   (`worded`):

   a record of this node (its name, and its cloud id when both say one)
       a preemption record: end_reason "preempted", cause PREEMPTED; a host-maintenance
       record (Compute Engine's `compute.instances.hostMaintenance` /
       `terminateOnHostMaintenance`): end_reason "host maintenance", cause MAINTENANCE;
       the event says when, and which record. A loss inside its announced maintenance
       window stays MAINTENANCE;
   none, and its fleet asks for spot capacity
       end_reason "<how>: counted as preempted" (the slot counts a preemption, as it always
       has), but the cause stays UNKNOWN: nothing tells it; the event says no record was
       found (or that they could not be read);
   none, another tier
       the end as the lists showed it ("vanished", "terminated"), the event says no record,
       the cause stays UNKNOWN.

A location whose records were not read (`tpucared plan`, a cloud without the method) keeps
the end as the lists showed it. Pure: the runtime does the reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tpucared.core.model.abilities import CloudAbilities
from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import (
    LossRecords,
    ObservedNode,
    PreemptionRecord,
    RecordKind,
    StateClass,
    ZoneObservation,
)
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import CapacityKind, FleetSpec
from tpucared.core.nodes import flex
from tpucared.core.nodes.cloud import ABSENT
from tpucared.core.view import View
from tpucared.core.vocab.actions import Loss

P = NodePhase

# What each kind of record says: the loss's cause, and words for the Transition's reason
# (what the record is called is the cloud's: `_record_words`).
CAUSES: Mapping[RecordKind, LossCause] = {
    RecordKind.PREEMPTED: LossCause.PREEMPTED,
    RecordKind.HOST_MAINTENANCE: LossCause.MAINTENANCE,
}
ENDS: Mapping[RecordKind, str] = {
    RecordKind.PREEMPTED: "preempted",
    RecordKind.HOST_MAINTENANCE: "terminated for host maintenance",
}
# The end_reason a record's cause gives the incarnation.
ENDS_AS: Mapping[LossCause, str] = {
    LossCause.PREEMPTED: "preempted",
    LossCause.MAINTENANCE: "host maintenance",
}
SPOT = frozenset({CapacityKind.SPOT, CapacityKind.PREEMPTIBLE})

Where = tuple[str, str, str]  # (api, project as the core names it, zone)


def loss_of(view: View, inc: IncarnationRecord, how: str) -> Loss | None:
    """The `Loss` to mark on the Transition that ends READY `inc` (`how`: what the lists
    showed), or None when its cloud's node states say "preempted" themselves."""
    if not view.abilities(inc.api).keeps_loss_records:
        return None
    return _loss(view.specs.get(inc.fleet), inc, how)


def where(loss: Loss) -> Where:
    return (loss.api, loss.project, loss.zone)


def record_of(loss: Loss, records: tuple[PreemptionRecord, ...]) -> PreemptionRecord | None:
    """The latest record of this node: its name, and the same cloud id where both say one
    (a record of an earlier node of the same name is not this one's)."""
    mine = [
        r
        for r in records
        if r.name == loss.node_name
        and (r.cloud_id is None or loss.cloud_id is None or r.cloud_id == loss.cloud_id)
    ]
    return max(mine, key=lambda r: r.at or datetime.min.replace(tzinfo=UTC), default=None)


def worded(
    loss: Loss,
    reason: str,
    cause: LossCause | None,
    zone: LossRecords | None,
    cloud: CloudAbilities,
) -> tuple[str, str, LossCause | None]:
    """(end_reason, reason, cause) of the Transition ending the node of `loss`, by the
    records read for its location (the module docstring), named as its `cloud` names them;
    as the lists showed it (`reason`, `cause`) where they were not read."""
    if zone is None:
        return reason, reason, cause
    what = cloud.preemption_records or "preemption record"
    record = None if zone.error is not None else record_of(loss, zone.records)
    # A loss inside its announced maintenance window stays MAINTENANCE whatever the record
    # (core/nodes/losses.py: host-maintenance terminations are logged as preemptions too).
    window = cause is LossCause.MAINTENANCE
    if record is not None:
        at = _when(record.at)
        named = f" {record.record}" if record.record else ""
        found = LossCause.MAINTENANCE if window else CAUSES[record.kind]
        done, record_words = ENDS[record.kind], _record_words(cloud, record.kind)
        return ENDS_AS[found], f"{done} at {at} (its {record_words}{named}); {loss.how}", found
    if zone.error is not None:
        missing = f"its {what} could not be read ({zone.error})"
    else:
        missing = f"no {what} names it"
    # No record: the cause stays what the lists told (UNKNOWN, or MAINTENANCE by its
    # window), never a guess, even where the slot counts the loss as a preemption.
    if loss.spot and not window:
        words = f"{loss.how}: a spot VM lost, {missing}: counted as a preemption"
        return f"{loss.how}: counted as preempted", words, cause
    return reason, f"{reason} ({missing})", cause


def suspects(
    specs: Sequence[FleetSpec],
    observations: Iterable[ZoneObservation],
    nodes: Iterable[IncarnationRecord],
    now: datetime,
    vanish_grace: timedelta,
) -> tuple[Loss, ...]:
    """The serving nodes this tick's plan will find lost whose end the cloud's records word
    (the module docstring, 1.): READY, of a cloud keeping records (as its lists say), in a
    location every list of which succeeded, and listed dead there, or absent (recorded
    ABSENT for `vanish_grace`, or absent now with no grace), unless that is a flex-start
    run's end. The lists of other clouds cost nothing here."""
    listed: dict[tuple[str, str], dict[str, ObservedNode]] = {}
    failed: set[tuple[str, str]] = set()
    keeping: set[str] = set()  # the APIs whose clouds keep loss records
    for obs in observations:
        where_ = (obs.project, obs.zone)
        if not obs.ok:
            failed.add(where_)
        elif obs.abilities.keeps_loss_records:
            keeping.add(obs.api)
            listed.setdefault(where_, {}).update((n.name, n) for n in obs.nodes)
    if not listed:
        return ()
    fleets = {s.name: s for s in specs}
    out: list[Loss] = []
    for inc in nodes:
        place = (inc.project, inc.zone)
        if inc.phase is not P.READY or inc.api not in keeping or place in failed:
            continue
        shown = listed.get(place)
        if shown is None:
            continue
        node = shown.get(inc.node_name)
        if node is not None and inc.cloud_id and node.cloud_id and node.cloud_id != inc.cloud_id:
            node = None  # another node of the same name: ours is gone
        state = ABSENT if node is None else node.state
        since = inc.cloud_state_since if inc.cloud_state == state else None
        if node is None:
            if vanish_grace > timedelta(0) and (since is None or now - since < vanish_grace):
                continue
            how = "vanished"
        elif node.state_class is StateClass.DEAD:
            how = node.state.lower()
        else:
            continue
        spec = fleets.get(inc.fleet)
        ends = (node.run_ends_at if node is not None else None) or inc.run_ends_at
        if flex.run_ended(spec, ends, since or now):
            continue  # a flex-start run's end (core/nodes/flex.py): no record to read
        out.append(_loss(spec, inc, how))
    return tuple(out)


def with_records(
    observations: Iterable[ZoneObservation], found: Mapping[Where, LossRecords]
) -> tuple[ZoneObservation, ...]:
    """The observations, each of a location in `found` (by its API) carrying its records."""
    return tuple(
        replace(o, loss_records=found[key]) if (key := (o.api, o.project, o.zone)) in found else o
        for o in observations
    )


def _loss(spec: FleetSpec | None, inc: IncarnationRecord, how: str) -> Loss:
    """The loss of `inc`; `spec`: its fleet's (None: not configured, its tier unknown)."""
    return Loss(
        api=inc.api, project=inc.project, zone=inc.zone, node_name=inc.node_name,
        cloud_id=inc.cloud_id, how=how, spot=spec is not None and spec.capacity in SPOT,
    )  # fmt: skip


def _record_words(cloud: CloudAbilities, kind: RecordKind) -> str:
    """What `cloud` calls its record of this kind, for the Transition's reason."""
    if kind is RecordKind.HOST_MAINTENANCE:
        return cloud.maintenance_records or "host-maintenance record"
    return cloud.preemption_records or "preemption record"


def _when(at: datetime | None) -> str:
    if at is None:
        return "an unknown time"
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
