"""The database schema: SQLAlchemy 2.0 typed declarative tables, one class per table.

These classes describe tables for the migrations (`migrations/versions/`) and column references
for the queries in `tpucared.store.repository`; they are never handed out. The repository runs
Core statements on them over a plain connection and returns the frozen records of
`tpucared.core.model`, so no ORM object, identity map or lazy load exists anywhere.

Table and column names are chosen for a person reading the file with `sqlite3`
(docs/inspecting.md): `nodes` are node incarnations, `node_id` points at one, `slot` is the slot
index. Every constraint and index has a deterministic name (`NAMING_CONVENTION`) so migrations can
alter them by name, which SQLite's batch mode needs. The same tables serve SQLite and
PostgreSQL: integer primary keys are AUTOINCREMENT on SQLite and SERIAL on PostgreSQL (ids are
never reused on either), booleans default to `false()` (`0` / `false`).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from tpucared.core.model.causes import LossCause
from tpucared.core.model.lifecycle import LIVE_PHASES
from tpucared.core.model.observed import MaintenanceWindow
from tpucared.core.model.records import AttemptOutcome, NodePhase
from tpucared.core.model.specs import ErrorKind
from tpucared.store.types import JSONText, MaintenanceText, StrEnumType, UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQL for "this node incarnation may still have a node in the cloud", shared by the partial
# unique indexes below and the repository's live queries (SQLite only uses a partial index when
# the query repeats its WHERE clause). Sorted so the DDL is stable.
LIVE_PHASE_VALUES: tuple[str, ...] = tuple(sorted(p.value for p in LIVE_PHASES))
LIVE_NODE_SQL = "phase IN ({})".format(", ".join(f"'{v}'" for v in LIVE_PHASE_VALUES))


def _partial(where: str) -> dict[str, Any]:
    """Dialect options for a partial index (SQLite and PostgreSQL spell it the same way)."""
    return {"sqlite_where": text(where), "postgresql_where": text(where)}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _version() -> Mapped[int]:
    """The change counter's value when the row was last inserted or updated, stamped by the
    triggers of migration 0010 (never by the store): a reader that kept its last snapshot
    reads only the rows newer than it (store/reads.py). BIGINT on PostgreSQL, as the counter."""
    return mapped_column(
        Integer().with_variant(BigInteger(), "postgresql"), server_default=text("0"), index=True
    )


class FleetRow(Base):
    """One configured fleet: the last applied spec and whether `tpucared down` ran."""

    __tablename__ = "fleets"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    spec_hash: Mapped[str] = mapped_column(String(64))
    spec_json: Mapped[str] = mapped_column(Text)
    applied_at: Mapped[datetime] = mapped_column(UTCDateTime)
    down: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class SlotRow(Base):
    """One slot of a fleet: a place for one slice, with counters that outlive incarnations.

    The counters are derived facts maintained in the same transaction as the fact they count
    (see the repository), so they always agree with `nodes` and `workload_attempts`.
    """

    __tablename__ = "slots"
    __table_args__ = (
        CheckConstraint(
            "attempts >= 0 AND preemptions >= 0 AND failures >= 0 AND create_failures >= 0",
            name="counters_not_negative",
        ),
        CheckConstraint("slot >= 0", name="slot_not_negative"),
    )

    fleet: Mapped[str] = mapped_column(ForeignKey("fleets.name"), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    preemptions: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    create_failures: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    next_create_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    next_zone: Mapped[str | None] = mapped_column(String(64))
    last_error: Mapped[str | None] = mapped_column(Text)
    done: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Multislice: since when READY slices wait for a missing one (core/nodes/multislice.py).
    held_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    version: Mapped[int] = _version()


class NodeRow(Base):
    """One node incarnation: from the recorded intent to create, to the node being gone.

    `<phase>_at` records when the incarnation entered each phase (the lifecycle is acyclic, so
    each phase is entered at most once); `phase_since` repeats the current one.
    """

    __tablename__ = "nodes"
    __table_args__ = (
        ForeignKeyConstraint(["fleet", "slot"], ["slots.fleet", "slots.slot"]),
        # At most one live incarnation per slot's slice: the second `request_node` is refused
        # even if the application check were bypassed.
        Index(
            "uq_nodes_live_slice", "fleet", "slot", "slice", unique=True, **_partial(LIVE_NODE_SQL)
        ),
        # A node name is unique in its zone in the cloud, so it must be among live records too.
        Index("uq_nodes_live_name", "zone", "node_name", unique=True, **_partial(LIVE_NODE_SQL)),
        Index("ix_nodes_fleet_slot_id", "fleet", "slot", "id"),
        # A slot's first create, one seek (store/ledger_reads.py, migration 0017).
        Index("ix_nodes_fleet_slot_requested_at", "fleet", "slot", "requested_at"),
        {"sqlite_autoincrement": True},  # ids appear in logs and events: never reuse one
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fleet: Mapped[str] = mapped_column(String(63))
    slot: Mapped[int] = mapped_column(Integer)
    node_name: Mapped[str] = mapped_column(String(63))
    zone: Mapped[str] = mapped_column(String(64))
    accelerator_type: Mapped[str] = mapped_column(String(64))
    phase: Mapped[NodePhase] = mapped_column(StrEnumType(NodePhase, 16))
    phase_since: Mapped[datetime] = mapped_column(UTCDateTime)
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime)
    creating_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    dead_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    deleting_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    end_reason: Mapped[str | None] = mapped_column(String(64))
    # What the cloud showed, as the planner wants it remembered (core.actions.CloudFacts).
    cloud_id: Mapped[str | None] = mapped_column(String(32))
    create_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cloud_state: Mapped[str | None] = mapped_column(String(64))  # or "ABSENT", "QUEUED:<state>"
    cloud_state_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    health: Mapped[str | None] = mapped_column(String(64))
    unhealthy_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The cloud call in flight and the classified outcome of the last one.
    operation: Mapped[str | None] = mapped_column(String(255))
    error: Mapped[ErrorKind | None] = mapped_column(StrEnumType(ErrorKind, 32))
    delete_calls: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    last_delete_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    queued_resource: Mapped[str | None] = mapped_column(String(255))
    # The node's project; '' (core DEFAULT_PROJECT) for the daemon's own, `gcp.project`.
    project: Mapped[str] = mapped_column(String(63), default="", server_default=text("''"))
    # Which slice of a multislice slot; 0 for a single-slice slot's node.
    slice: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    # The cloud API that made (or adopted) it, core `FleetSpec.api` (migration 0008).
    api: Mapped[str] = mapped_column(String(16), default="tpu", server_default=text("'tpu'"))
    run_ends_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # flex-start (0009)
    # The next host-maintenance window as last listed, JSON (0011).
    maintenance: Mapped[MaintenanceWindow | None] = mapped_column(MaintenanceText)
    # Why it was lost, core/model/causes.py `LossCause` (0012); NULL: not lost.
    loss_cause: Mapped[LossCause | None] = mapped_column(StrEnumType(LossCause, 32))
    # When the cloud itself lost it, where it says (a preemption record's time, 0016); NULL:
    # not lost, or no time given (the ledger then starts the loss at dead_at).
    cloud_lost_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # What `on_maintenance` did about a window (0013): the window start it acted on, when the
    # workload got its stop signal, when the cloud was asked to start the maintenance now.
    maintenance_handled_for: Mapped[datetime | None] = mapped_column(UTCDateTime)
    maintenance_checkpoint_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    maintenance_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    version: Mapped[int] = _version()  # its workers' changes touch it too (0010)


class WorkerRow(Base):
    """One worker host of a node incarnation, with its addresses and pinned SSH host keys."""

    __tablename__ = "workers"

    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), primary_key=True)
    worker: Mapped[int] = mapped_column(Integer, primary_key=True)
    internal_ip: Mapped[str] = mapped_column(String(45))
    external_ip: Mapped[str | None] = mapped_column(String(45))
    # JSON list of "type base64" strings; [] until the first successful connection pins them.
    host_keys: Mapped[list[str]] = mapped_column(JSONText, default=list, server_default="[]")


class WorkloadAttemptRow(Base):
    """One launch of the workload on every worker of a slot's node (TPUCARED_ATTEMPT)."""

    __tablename__ = "workload_attempts"
    __table_args__ = (
        ForeignKeyConstraint(["fleet", "slot"], ["slots.fleet", "slots.slot"]),
        UniqueConstraint("fleet", "slot", "number"),
        # At most one running attempt per slot.
        Index(
            "uq_workload_attempts_running",
            "fleet",
            "slot",
            unique=True,
            **_partial("ended_at IS NULL"),
        ),
        # The ledger's per-slot reads from a time on (store/ledger_reads.py, migration 0017).
        Index("ix_workload_attempts_fleet_slot_ended_at", "fleet", "slot", "ended_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fleet: Mapped[str] = mapped_column(String(63))
    slot: Mapped[int] = mapped_column(Integer)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    outcome: Mapped[AttemptOutcome | None] = mapped_column(StrEnumType(AttemptOutcome, 16))
    # {"0": 0, "1": 137, "2": null}: worker index -> exit code (null: unknown, e.g. host gone).
    exit_codes: Mapped[dict[str, int | None]] = mapped_column(
        JSONText, default=dict, server_default="{}"
    )
    detail: Mapped[str | None] = mapped_column(Text)
    # What the workload told in its progress file, worker 0's (0014): NULL, nothing.
    first_step_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    last_step_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_checkpoint: Mapped[int | None] = mapped_column(BigInteger)
    last_checkpoint_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    version: Mapped[int] = _version()


class CreateAttemptRow(Base):
    """One nodes.create / queuedResources.create call and how it ended: our view of capacity."""

    __tablename__ = "create_attempts"
    __table_args__ = (
        ForeignKeyConstraint(["fleet", "slot"], ["slots.fleet", "slots.slot"]),
        Index("ix_create_attempts_fleet_slot_id", "fleet", "slot", "id"),
        Index("ix_create_attempts_zone_started_at", "zone", "started_at"),
        # The ledger's per-slot reads from a time on (store/ledger_reads.py, migration 0017).
        Index("ix_create_attempts_fleet_slot_started_at", "fleet", "slot", "started_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fleet: Mapped[str] = mapped_column(String(63))
    slot: Mapped[int] = mapped_column(Integer)
    zone: Mapped[str] = mapped_column(String(64))
    accelerator_type: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    outcome: Mapped[str] = mapped_column(String(32))  # "ok" or an ErrorKind value
    latency_s: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str | None] = mapped_column(Text)
    node_id: Mapped[int | None] = mapped_column(ForeignKey("nodes.id"))
    version: Mapped[int] = _version()


class EventRow(Base):
    """The append-only event log (`tpucared events`). No foreign keys: logging never fails
    because of what it mentions, and rows stay meaningful if old records are pruned."""

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_at", "at"),
        Index("ix_events_fleet_id", "fleet", "id"),
        Index("ix_events_node_id_id", "node_id", "id"),
        {"sqlite_autoincrement": True},  # `events --follow` resumes after an id: never reuse
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    kind: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    fleet: Mapped[str | None] = mapped_column(String(63))
    slot: Mapped[int | None] = mapped_column(Integer)
    node: Mapped[str | None] = mapped_column(String(63))  # node name
    node_id: Mapped[int | None] = mapped_column(Integer)  # the incarnation, for exact joins
    details: Mapped[dict[str, Any]] = mapped_column(JSONText, default=dict, server_default="{}")


class ChangeCounterRow(Base):
    """One row, bumped by triggers (migration 0002) in the same transaction as every write to
    the tables the planner's snapshot reads: equal counters, equal snapshot. Never written by
    the store itself."""

    __tablename__ = "change_counter"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    # BIGINT on PostgreSQL, whose INTEGER is 32 bits (SQLite's is 64): see migration 0002.
    counter: Mapped[int] = mapped_column(
        Integer().with_variant(BigInteger(), "postgresql"), default=0, server_default=text("0")
    )
    # Bumped with the counter by every delete from the snapshot's tables (migration 0010): a
    # removed row leaves no version to find, so a reader that sees it move reads everything.
    deletions: Mapped[int] = mapped_column(
        Integer().with_variant(BigInteger(), "postgresql"), default=0, server_default=text("0")
    )


class ZoneHealthRow(Base):
    """Whether the daemon could list a (project, zone): consecutive failed lists, the last
    error and since when (migration 0003), when it is listed next (0007). Written by the
    runtime only when it changes."""

    __tablename__ = "zone_health"
    __table_args__ = (CheckConstraint("failures >= 0", name="failures_not_negative"),)

    project: Mapped[str] = mapped_column(String(63), primary_key=True)
    zone: Mapped[str] = mapped_column(String(64), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    error_kind: Mapped[ErrorKind | None] = mapped_column(StrEnumType(ErrorKind, 32))
    error_message: Mapped[str | None] = mapped_column(Text)
    failing_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_ok_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    unreachable: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # When a failing zone is listed next: its list backoff (migration 0007); NULL when fine.
    next_list_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class LeaderLeaseRow(Base):
    """Which `tpucared run` leads on this database (migration 0005): one row, taken and renewed
    by compare-and-set on `epoch`, which grows by one at every change of holder. Every
    instant is the database's clock. The holder stays after a release (status shows who led);
    `expires_at` then is the release. Not in the change counter's tables: the planner's
    snapshot does not read it, and renewals must not make every tick look changed."""

    __tablename__ = "leader_lease"
    __table_args__ = (
        CheckConstraint("id = 1", name="single_row"),
        CheckConstraint("epoch >= 0", name="epoch_not_negative"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    epoch: Mapped[int] = mapped_column(
        Integer().with_variant(BigInteger(), "postgresql"), default=0, server_default=text("0")
    )
    holder_host: Mapped[str | None] = mapped_column(String(255))
    holder_pid: Mapped[int | None] = mapped_column(Integer)
    holder_instance: Mapped[str | None] = mapped_column(String(36))
    acquired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    renewed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class LedgerDayRow(Base):
    """A closed UTC day of a slot's ledger (migration 0015): its seconds, in integer
    microseconds, per category, sub-phase and loss cause ('' for none), and the steps lost by
    the wasted progress that began that day. Derived from the records, never the only copy:
    written by the maintenance task (runtime/ledger_days.py) for the days that can no longer
    change (core/ledger/kept.py), read by `tpucared goodput` instead of tiling them again.
    Not in the change counter's tables: the planner's snapshot does not read it."""

    __tablename__ = "ledger_days"

    fleet: Mapped[str] = mapped_column(String(63), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    category: Mapped[str] = mapped_column(String(64), primary_key=True)
    phase: Mapped[str] = mapped_column(String(32), primary_key=True)
    cause: Mapped[str] = mapped_column(String(32), primary_key=True)
    microseconds: Mapped[int] = mapped_column(BigInteger)
    steps: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))


class LedgerTotalRow(Base):
    """A slot's kept days summed (migration 0015): per category, sub-phase and cause ('' for
    none), what its `ledger_days` rows add up to, kept with them in the same transaction, so
    `tpucared goodput` over the whole history reads one row per slot and category instead of
    one per day."""

    __tablename__ = "ledger_totals"

    fleet: Mapped[str] = mapped_column(String(63), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    category: Mapped[str] = mapped_column(String(64), primary_key=True)
    phase: Mapped[str] = mapped_column(String(32), primary_key=True)
    cause: Mapped[str] = mapped_column(String(32), primary_key=True)
    microseconds: Mapped[int] = mapped_column(BigInteger)
    steps: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))


class LedgerKeptRow(Base):
    """Up to when a slot's ledger is kept in `ledger_days` (migration 0015): a UTC midnight;
    written in the same transaction as the days it covers, so a kill -9 leaves both or
    neither."""

    __tablename__ = "ledger_kept"

    fleet: Mapped[str] = mapped_column(String(63), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    kept_until: Mapped[datetime] = mapped_column(UTCDateTime)


metadata = Base.metadata
