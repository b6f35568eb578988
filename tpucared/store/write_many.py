"""A run of compare-and-set writes of node incarnations in a few statements: `Tx.cas_many`.

Where it sits: the executor (runtime/nodes/executor.py) hands it the runs of Transition,
DeleteNode (intent) and RecordCloud actions of a plan: a preemption storm's tick is hundreds of
READY -> DEAD, DEAD -> DELETING and DELETING -> DELETED, and as many new cloud states of the
nodes being deleted. Each action is written exactly as `transition`, `begin_delete` or
`record_cloud` (write_nodes.py) would write it, events included (a RecordCloud that changes
nothing writes nothing), and one that would be refused (`StaleWrite`, `IllegalTransition`,
`NotFound`) is refused here too, without writing anything.

Why: every statement is several trips to the database driver's thread, about a millisecond on
a quiet 2-core machine and several under a storm's load; at two statements an action (the
read, the compare-and-set), a storm tick's execution outlasted its poll interval
(docs/benchmarks.md). Here a run costs one read (and one of the workers a RecordCloud with
endpoints compares), one UPDATE executed for many rows, one for the slots' bookkeeping, and the
workers of the few actions that carry endpoints.

How: every incarnation of the run is read at once (`FOR UPDATE` on PostgreSQL; a SQLite write
transaction already keeps other writers out), then each action is checked, in order, against
the row as it stands after the ones before it, the new row computed from the same functions
as the single write (node_values.py), and its events appended. The UPDATE matches each row by
id and by the phase it was read in, so a row that changed under us (nothing should) is not
overwritten: the row count says so and `ConcurrentChange` is raised, and the caller undoes the
run and applies it one action at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import bindparam, select, update

from tpucared.core.model.lifecycle import IllegalTransition, check_transition
from tpucared.core.model.records import IncarnationRecord, NodePhase, WorkerRecord
from tpucared.core.vocab.actions import CloudFacts, DeleteNode, RecordCloud, Transition
from tpucared.store import convert, statements
from tpucared.store.errors import NotFound, StaleWrite
from tpucared.store.models import NodeRow
from tpucared.store.node_values import (
    PHASE_AT,
    cause_details,
    check_slot_update,
    cloud_values,
    deleting_values,
    lost_details,
    same_cloud,
    transition_values,
)
from tpucared.store.write_base import KEEP, slot_update_params
from tpucared.store.write_nodes import NodeWrites

# A DeleteNode here is its intent (`begin_delete`); a RecordCloud, `record_cloud`.
CasAction = Transition | DeleteNode | RecordCloud
Refusal = StaleWrite | IllegalTransition | NotFound

# Every column a transition or a delete intent may change (node_values.py).
WRITTEN: Final = (
    "phase",
    "phase_since",
    *PHASE_AT.values(),
    "error",
    "end_reason",
    "operation",
    "cloud_state",
    "cloud_state_since",
    "health",
    "unhealthy_since",
    "cloud_id",
    "create_time",
    "run_ends_at",
    "maintenance",
    "loss_cause",
    "cloud_lost_at",
    "delete_calls",
    "last_delete_at",
)

UPDATE_MANY = (
    update(NodeRow)
    .where(NodeRow.id == bindparam("row_id"), NodeRow.phase == bindparam("row_phase"))
    .values({column: bindparam(f"v_{column}") for column in WRITTEN})
)


class ConcurrentChange(Exception):
    """A row of the run changed between its read and its write: nothing of the run may stand."""


class ManyNodeWrites(NodeWrites):
    async def cas_many(
        self, actions: Sequence[CasAction], now: datetime
    ) -> list[IncarnationRecord | Refusal]:
        """Each action as `transition` (Transition), `begin_delete` (DeleteNode) or
        `record_cloud` (RecordCloud) would write it, in order: its incarnation as written (as
        it stands, for a RecordCloud that changes nothing), or why it was refused (nothing of
        it written). See the module docstring."""
        ids = sorted({a.incarnation_id for a in actions})
        stmt = select(NodeRow.__table__).where(NodeRow.id.in_(ids))
        if self._conn.dialect.name == "postgresql":
            stmt = stmt.with_for_update()
        rows = {r["id"]: r for r in await self._rows(stmt)}
        read_phase = {i: row["phase"] for i, row in rows.items()}
        workers = await self._compared_workers(actions)
        results: list[IncarnationRecord | Refusal] = []
        written: list[tuple[CasAction, IncarnationRecord, IncarnationRecord]] = []
        changed: dict[int, dict[str, Any]] = {}
        for action in actions:
            row = rows.get(action.incarnation_id)
            try:
                if row is None:
                    raise NotFound(f"node incarnation {action.incarnation_id}")
                current = convert.incarnation(row)
                new_row = self._apply(action, current, row, workers, now)
            except (StaleWrite, IllegalTransition, NotFound) as refusal:
                results.append(refusal)
                continue
            if new_row is None:  # a RecordCloud of what is recorded already: nothing written
                results.append(current)
                continue
            rows[action.incarnation_id] = changed[action.incarnation_id] = new_row
            results.append(inc := convert.incarnation(new_row))
            written.append((action, inc, current))
            cloud = None if isinstance(action, DeleteNode) else action.cloud
            if cloud is not None and cloud.endpoints is not None:  # a later RecordCloud's
                workers[inc.id] = _as_workers(inc.id, cloud)
        await self._write_rows(changed, read_phase)
        await self._slot_updates([a for a, _, _ in written])
        for action, inc, before in written:
            await self._after(action, inc, before, now)
        return results

    async def _compared_workers(
        self, actions: Sequence[CasAction]
    ) -> dict[int, tuple[WorkerRecord, ...]]:
        """The workers each RecordCloud that carries endpoints compares them with."""
        ids = [
            a.incarnation_id
            for a in actions
            if isinstance(a, RecordCloud) and a.cloud.endpoints is not None
        ]
        return dict(await self.workers(ids)) if ids else {}

    def _apply(
        self,
        action: CasAction,
        current: IncarnationRecord,
        row: Mapping[str, Any],
        workers: Mapping[int, Sequence[WorkerRecord]],
        now: datetime,
    ) -> dict[str, Any] | None:
        """The row once `action` is written (None: a RecordCloud that changes nothing);
        refused as the single write would be."""
        if isinstance(action, RecordCloud):
            if current.phase is not action.expected:
                raise StaleWrite(
                    f"phase of node incarnation {current.id}", action.expected, current.phase
                )
            if same_cloud(current, workers.get(current.id, ()), action.cloud):
                return None
            return {**row, **cloud_values(action.cloud)}
        if isinstance(action, Transition):
            check_transition(action.expected, action.new)
            check_slot_update(current, action.slot_update)
            end_reason = action.end_reason if action.end_reason is not None else KEEP
            values = transition_values(
                current,
                action.new,
                now,
                end_reason,
                KEEP,
                action.cloud,
                action.cause,
                action.lost_at,
            )
        else:
            values = deleting_values(current, action.expected, now, action.end_reason, action.cause)
            values["delete_calls"] = current.delete_calls + 1
        if current.phase is not action.expected:
            raise StaleWrite(
                f"phase of node incarnation {current.id}", action.expected, current.phase
            )
        return {**row, **values}

    async def _write_rows(
        self, changed: dict[int, dict[str, Any]], read_phase: dict[int, NodePhase]
    ) -> None:
        if not changed:
            return
        params = [
            {
                "row_id": i,
                "row_phase": read_phase[i],
                **{f"v_{column}": row[column] for column in WRITTEN},
            }
            for i, row in changed.items()
        ]
        result = await self._conn.execute(UPDATE_MANY, params)
        # The lock makes this a check that should never fire; asyncpg gives no row count for
        # an UPDATE executed for many rows (SQLAlchemy says so), and its FOR UPDATE suffices.
        sane = self._conn.dialect.supports_sane_multi_rowcount
        if sane and result.rowcount != len(params):
            raise ConcurrentChange(f"{len(params) - result.rowcount} of {len(params)} rows")

    async def _slot_updates(self, actions: Sequence[CasAction]) -> None:
        """The planner's slot bookkeeping of the transitions written, in their order."""
        updates = [a.slot_update for a in actions if isinstance(a, Transition) and a.slot_update]
        if not updates:
            return
        params = [slot_update_params(su) for su in updates]
        result = await self._conn.execute(statements.SLOT_UPDATE, params)
        sane = self._conn.dialect.supports_sane_multi_rowcount
        if sane and result.rowcount != len(params):
            raise ConcurrentChange(f"{len(params) - result.rowcount} of {len(params)} slots")

    async def _after(
        self, action: CasAction, inc: IncarnationRecord, before: IncarnationRecord, now: datetime
    ) -> None:
        """What the single write does after its compare-and-set, but for the slot's
        bookkeeping (`_slot_updates`): the workers, the events. `before`: the row it changed."""
        cause = cause_details(before, action.cause) if not isinstance(action, RecordCloud) else {}
        if isinstance(action, DeleteNode):
            self._deleting_event(inc, action.expected, now, action.reason, action.end_reason, cause)
            return
        if action.cloud is not None and action.cloud.endpoints is not None:
            await self.set_workers(inc.id, action.cloud.endpoints)
        if isinstance(action, RecordCloud):
            self._cloud_event(before, inc, action.cloud, now, action.reason)
            return
        end_reason = action.end_reason if action.end_reason is not None else KEEP
        self._transition_events(
            inc, action.expected, action.new, now, action.reason, end_reason, KEEP,
            action.cloud, action.slot_update, {**cause, **lost_details(action.lost_at)},
        )  # fmt: skip
        self._maintenance_event(before, inc, now)


def _as_workers(incarnation_id: int, cloud: CloudFacts) -> tuple[WorkerRecord, ...]:
    """The workers `cloud`'s endpoints make (as `set_workers` writes them, keys aside)."""
    assert cloud.endpoints is not None
    return tuple(
        WorkerRecord(incarnation_id, ep.index, ep.internal_ip, ep.external_ip)
        for ep in cloud.endpoints
    )
