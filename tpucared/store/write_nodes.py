"""Writes to node incarnations and their workers: the executor's half of core/vocab/actions.py.

Every phase change is a compare-and-set on the phase the planner saw
(`UPDATE nodes ... WHERE id = :id AND phase = :expected`, row count checked), checked against
`core.model.lifecycle` first, and stamped into `<phase>_at` / `phase_since`; each write appends its
event in the same transaction. A lost race raises `StaleWrite` and writes nothing, which the
executor treats as "skip this stale action".

Which method carries out which action (see core/vocab/actions.py for the contract):
  CreateNode  request_node (intent), then transition REQUESTED->CREATING or record_outcome
  DeleteNode  begin_delete (intent), then record_outcome
  Transition  transition (with CloudFacts and SlotUpdate)
  RecordCloud record_cloud, or record_clouds for a whole tick
  Adopt       adopt

The workers of an incarnation (addresses, pinned host keys) are written by `WorkerWrites`
(store/write_workers.py), which this class extends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ClauseElement

from tpucared.core.model.causes import LossCause
from tpucared.core.model.lifecycle import check_transition
from tpucared.core.model.records import IncarnationRecord, NodePhase, WorkerRecord
from tpucared.core.model.specs import DEFAULT_API, DEFAULT_PROJECT, ErrorKind
from tpucared.core.nodes import maintenance
from tpucared.core.nodes.flex import RUN_ENDED, how
from tpucared.core.vocab.actions import CloudFacts, RecordCloud, SlotUpdate
from tpucared.store import convert
from tpucared.store.errors import LiveIncarnationExists, NotFound, StaleWrite
from tpucared.store.models import NodeRow
from tpucared.store.node_values import (
    cause_details,
    check_slot_update,
    cloud_values,
    deleting_values,
    lost_details,
    same_cloud,
    transition_values,
)
from tpucared.store.statements import cas_statement
from tpucared.store.write_base import KEEP, Keep, given, slot_update_details
from tpucared.store.write_workers import WorkerWrites


@dataclass(frozen=True)
class CloudWrites:
    """What `record_clouds` did: the incarnations it changed, and the stale actions' ids."""

    changed: tuple[IncarnationRecord, ...]
    stale: tuple[int, ...]


class NodeWrites(WorkerWrites):
    async def _require_incarnation(self, incarnation_id: int) -> IncarnationRecord:
        inc = await self.incarnation(incarnation_id)
        if inc is None:
            raise NotFound(f"node incarnation {incarnation_id}")
        return inc

    async def _cas(
        self, incarnation_id: int, expected: NodePhase, values: dict[str, object]
    ) -> IncarnationRecord:
        """UPDATE the incarnation only if its phase is still `expected`; StaleWrite if not."""
        params = {f"v_{k}": v for k, v in values.items() if not isinstance(v, ClauseElement)}
        params.update(cas_id=incarnation_id, cas_expected=expected)
        stmt = cas_statement(values)
        row = (await self._conn.execute(stmt, params)).mappings().one_or_none()
        if row is None:
            current = await self._require_incarnation(incarnation_id)
            raise StaleWrite(f"phase of node incarnation {incarnation_id}", expected, current.phase)
        return convert.incarnation(row)

    async def request_node(
        self,
        fleet: str,
        slot: int,
        node_name: str,
        zone: str,
        accelerator_type: str,
        now: datetime,
        *,
        queued_resource: str | None = None,
        reason: str = "",
        project: str = DEFAULT_PROJECT,
        slice_index: int = 0,
        api: str = DEFAULT_API,
    ) -> IncarnationRecord:
        """Record the intent to create a node through cloud API `api`, before the create
        call (CreateNode T1).
        `LiveIncarnationExists` if the slot's slice, or the node name in that zone, has a
        live incarnation: the executor skips the action."""
        await self._require_slot(fleet, slot)
        live = [i for i in await self.incarnations(fleet, slot, live_only=True)
                if i.slice == slice_index]  # fmt: skip
        if live:
            what = f"live incarnation of {fleet}/{slot}" + (
                f" slice {slice_index}" if slice_index else ""
            )
            raise LiveIncarnationExists(what, None, live[0].id)
        stmt = insert(NodeRow).values(
            fleet=fleet, slot=slot, node_name=node_name, zone=zone,
            accelerator_type=accelerator_type, phase=NodePhase.REQUESTED, phase_since=now,
            requested_at=now, queued_resource=queued_resource, project=project,
            slice=slice_index, api=api,
        ).returning(*NodeRow.__table__.c)  # fmt: skip
        try:
            row = (await self._conn.execute(stmt)).mappings().one()
        except IntegrityError as exc:
            if "UNIQUE" not in str(exc.orig):
                raise
            # uq_nodes_live_name: another slot's live incarnation has this name in this zone.
            raise LiveIncarnationExists(f"live node {zone}/{node_name}", None, str(exc)) from exc
        inc = convert.incarnation(row)
        self._node_event(
            inc,
            "node.requested",
            reason or f"{node_name}: create requested in {zone} ({accelerator_type})",
            now,
            to=NodePhase.REQUESTED.value,
            zone=zone,
            accelerator_type=accelerator_type,
            queued_resource=queued_resource,
        )
        return inc

    async def transition(
        self,
        incarnation_id: int,
        expected: NodePhase,
        new: NodePhase,
        now: datetime,
        *,
        reason: str = "",
        end_reason: str | Keep | None = KEEP,
        operation: str | Keep | None = KEEP,
        cloud: CloudFacts | None = None,
        slot_update: SlotUpdate | None = None,
        cause: LossCause | None = None,
        lost_at: datetime | None = None,
    ) -> IncarnationRecord:
        """Move an incarnation from `expected` to `new` (compare-and-set) and append a
        `node.<new>` event whose message is `reason`; `cause` (a loss's) is written to
        `loss_cause` and, when it changes it, put in the event's details; `lost_at` (the
        cloud's own time of the loss, where it says) to `cloud_lost_at` and the event.

        Also: `<new>_at` and `phase_since` = now (and `dead_at` on entering DELETING if
        unset); `error` cleared (the planner has decided on it); `operation` cleared on
        entering a terminal phase unless given; `end_reason` and the cloud facts if given
        (workers replaced by `cloud.endpoints` unless None); `slot_update` applied to the
        incarnation's slot. Raises `IllegalTransition` for an edge not in the lifecycle
        table, `StaleWrite` if the phase is no longer `expected`, `NotFound`.
        """
        check_transition(expected, new)
        current = await self._require_incarnation(incarnation_id)
        check_slot_update(current, slot_update)
        values = transition_values(current, new, now, end_reason, operation, cloud, cause, lost_at)
        inc = await self._cas(incarnation_id, expected, values)
        if cloud is not None and cloud.endpoints is not None:
            await self.set_workers(inc.id, cloud.endpoints)
        if slot_update is not None:
            await self.apply_slot_update(slot_update)
        self._transition_events(
            inc, expected, new, now, reason, end_reason, operation, cloud, slot_update,
            {**cause_details(current, cause), **lost_details(lost_at)},
        )  # fmt: skip
        self._maintenance_event(current, inc, now)
        return inc

    def _transition_events(
        self,
        inc: IncarnationRecord,
        expected: NodePhase,
        new: NodePhase,
        now: datetime,
        reason: str,
        end_reason: str | Keep | None,
        operation: str | Keep | None,
        cloud: CloudFacts | None,
        slot_update: SlotUpdate | None,
        cause: Mapping[str, object] | None = None,
    ) -> None:
        """The events of `transition`: `node.<new>` (with the loss's `cause` when it records
        one: node_values.cause_details), and `node.run_ended` for a flex-start run's end
        (docs/logs.md, the metrics' count)."""
        details: dict[str, Any] = {"from": expected.value, "to": new.value}
        details.update(given(end_reason=end_reason, operation=operation))
        details.update(cause or {})
        if cloud is not None:
            details["cloud"] = cloud_values(cloud)
        if slot_update is not None:
            details["slot_update"] = slot_update_details(slot_update)
        message = reason or f"{inc.node_name}: {expected.value} -> {new.value}"
        self._node_event(inc, f"node.{new.value}", message, now, **details)
        if end_reason == RUN_ENDED:
            when = inc.run_ends_at.isoformat() if inc.run_ends_at else None
            self._node_event(
                inc, "node.run_ended", f"{inc.node_name}: {how(inc.run_ends_at)}", now,
                run_ends_at=when,
            )  # fmt: skip

    async def begin_delete(
        self,
        incarnation_id: int,
        expected: NodePhase,
        now: datetime,
        *,
        end_reason: str | None = None,
        reason: str = "",
        cause: LossCause | None = None,
    ) -> IncarnationRecord:
        """Record the intent to delete, before the delete call (DeleteNode T1): CAS on
        `expected`; move to DELETING unless already there (end_reason and the loss's `cause`
        if given); count the call (`delete_calls`, `last_delete_at`) and clear `error`."""
        current = await self._require_incarnation(incarnation_id)
        values = deleting_values(current, expected, now, end_reason, cause)
        values["delete_calls"] = NodeRow.delete_calls + 1  # in SQL: the row as it stands
        inc = await self._cas(incarnation_id, expected, values)
        self._deleting_event(inc, expected, now, reason, end_reason, cause_details(current, cause))
        return inc

    def _deleting_event(
        self,
        inc: IncarnationRecord,
        expected: NodePhase,
        now: datetime,
        reason: str,
        end_reason: str | None,
        cause: Mapping[str, object] | None = None,
    ) -> None:
        self._node_event(
            inc,
            "node.deleting",
            reason or f"{inc.node_name}: delete call {inc.delete_calls}",
            now,
            **{"from": expected.value},
            to=NodePhase.DELETING.value,
            delete_calls=inc.delete_calls,
            end_reason=end_reason,
            **(cause or {}),
        )

    async def record_outcome(
        self,
        incarnation_id: int,
        expected: NodePhase,
        now: datetime,
        *,
        operation: str | Keep | None = KEEP,
        error: ErrorKind | Keep | None = KEEP,
        last_error: str | Keep | None = KEEP,
        reason: str = "",
    ) -> IncarnationRecord:
        """Record what a create/delete call or its operation came to, without deciding
        anything (the planner does, next tick): the operation in flight (or None when it
        finished), the classified `error`, and the slot's `last_error` message. CAS on the
        phase the call was made in."""
        values = given(operation=operation, error=error)
        if not values and last_error is KEEP:
            raise ValueError("record_outcome needs operation, error or last_error")
        # With only last_error to write, the CAS still checks the phase (a no-op SET).
        inc = await self._cas(incarnation_id, expected, values or {"phase": expected})
        if last_error is not KEEP:
            await self.update_slot(inc.fleet, inc.slot, now, last_error=last_error)
        details = given(operation=operation, error=error, last_error=last_error)
        what = _outcome_summary(operation, error, last_error)
        self._node_event(inc, "node.outcome", reason or f"{inc.node_name}: {what}", now, **details)
        return inc

    async def record_cloud(
        self,
        incarnation_id: int,
        expected: NodePhase,
        cloud: CloudFacts,
        now: datetime,
        *,
        reason: str = "",
    ) -> IncarnationRecord:
        """Overwrite the cloud facts (and the workers when `cloud.endpoints` is not None)
        without a phase change (RecordCloud). CAS on `expected` (`StaleWrite`). Writes
        nothing, not even an event, when the facts are unchanged."""
        current = await self._require_incarnation(incarnation_id)
        if current.phase is not expected:
            raise StaleWrite(f"phase of node incarnation {incarnation_id}", expected, current.phase)
        workers = (await self.workers([incarnation_id])).get(incarnation_id, ())
        return await self._record_cloud(current, workers, cloud, now, reason) or current

    async def record_clouds(self, actions: Sequence[RecordCloud], now: datetime) -> CloudWrites:
        """A tick's RecordCloud actions in one go (two queries to read, a write per changed
        incarnation). An action whose incarnation left its `expected` phase is skipped and
        reported in `stale`, so one stale action does not undo the others."""
        ids = [a.incarnation_id for a in actions]
        stmt = select(NodeRow.__table__).where(NodeRow.id.in_(ids))
        current = {r["id"]: convert.incarnation(r) for r in await self._rows(stmt)}
        if missing := sorted(set(ids) - set(current)):
            raise NotFound(f"node incarnations {missing}")
        workers = await self.workers(ids)
        changed, stale = [], []
        for action in actions:
            inc = current[action.incarnation_id]
            if inc.phase is not action.expected:
                stale.append(inc.id)
                continue
            written = await self._record_cloud(
                inc, workers.get(inc.id, ()), action.cloud, now, action.reason
            )
            if written is not None:
                changed.append(written)
        return CloudWrites(changed=tuple(changed), stale=tuple(stale))

    async def _record_cloud(
        self,
        current: IncarnationRecord,
        workers: Sequence[WorkerRecord],
        cloud: CloudFacts,
        now: datetime,
        reason: str,
    ) -> IncarnationRecord | None:
        """Write the facts if they differ; None when there was nothing to write."""
        if same_cloud(current, workers, cloud):
            return None
        inc = await self._cas(current.id, current.phase, cloud_values(cloud))
        if cloud.endpoints is not None:
            await self.set_workers(inc.id, cloud.endpoints)
        self._cloud_event(current, inc, cloud, now, reason)
        return inc

    def _cloud_event(
        self,
        before: IncarnationRecord,
        inc: IncarnationRecord,
        cloud: CloudFacts,
        now: datetime,
        reason: str,
    ) -> None:
        """The event of a RecordCloud that wrote `cloud`: `inc` as written, `before` it."""
        health = f", health {inc.health}" if inc.health else ""
        self._node_event(
            inc,
            "node.cloud",
            reason or f"{inc.node_name}: cloud {inc.cloud_state}{health}",
            now,
            cloud=cloud_values(cloud),
            previous_cloud_state=before.cloud_state,
            previous_health=before.health,
        )
        self._maintenance_event(before, inc, now)

    def _maintenance_event(
        self, before: IncarnationRecord, inc: IncarnationRecord, now: datetime
    ) -> None:
        """`node.maintenance_scheduled` when the write made a window appear or move
        (core/nodes/maintenance.py `announced`; docs/logs.md)."""
        window = inc.maintenance
        if window is None or not maintenance.announced(before.maintenance, window):
            return
        self._node_event(
            inc, maintenance.SCHEDULED_EVENT,
            f"{inc.node_name}: {maintenance.describe(window)}", now,
            **maintenance.details(window),
        )  # fmt: skip

    async def adopt(
        self,
        fleet: str,
        slot: int,
        node_name: str,
        zone: str,
        accelerator_type: str,
        phase: NodePhase,
        cloud: CloudFacts,
        now: datetime,
        *,
        queued_resource: str | None = None,
        end_reason: str | None = None,
        reason: str = "",
        project: str = DEFAULT_PROJECT,
        slice_index: int = 0,
        api: str = DEFAULT_API,
    ) -> IncarnationRecord:
        """Take on a node we own but have no live record of (Adopt): a REQUESTED record moved
        at once to `phase`, with the cloud facts. `LiveIncarnationExists` if one is live."""
        inc = await self.request_node(
            fleet,
            slot,
            node_name,
            zone,
            accelerator_type,
            now,
            queued_resource=queued_resource,
            reason=reason or f"{node_name}: adopting the node found in {zone}",
            project=project,
            slice_index=slice_index,
            api=api,
        )
        if phase is NodePhase.REQUESTED:
            return await self.record_cloud(inc.id, phase, cloud, now, reason=reason)
        return await self.transition(
            inc.id,
            NodePhase.REQUESTED,
            phase,
            now,
            reason=reason or f"{node_name}: adopted as {phase.value}",
            end_reason=end_reason if end_reason is not None else KEEP,
            cloud=cloud,
        )


def _outcome_summary(
    operation: str | Keep | None, error: ErrorKind | Keep | None, last_error: str | Keep | None
) -> str:
    """The event message of record_outcome: what was learnt, never the KEEP sentinel."""
    if isinstance(error, ErrorKind):
        return f"error {error.value}"
    if isinstance(operation, str):
        return f"operation {operation} in flight"
    if operation is None:
        return "operation finished"
    if isinstance(last_error, str):
        return f"last error: {last_error}"
    return "outcome recorded"
