"""The leader lease in the database: attempts (take or renew), release, and the write fence.

The rules (what an attempt does, when a lease has expired) are pure, in
`tpucared.core.leadership.lease`; this module runs them against the `leader_lease` row
(migration 0005) inside one write transaction each:

- `LeaseWrites.attempt_lease`: reads the database's `now` and the row, then renews
  (`UPDATE ... WHERE epoch = mine AND holder_instance = me`) or takes (`UPDATE ... SET epoch =
  seen + 1 ... WHERE epoch = seen AND (expired OR holder = me)`): a compare-and-set on
  the epoch, so of two standbys taking at once exactly one wins. A take appends a
  `leader_changed` event in the same transaction.
- `LeaseWrites.release_lease`: a clean stop sets `expires_at` to now, so a standby takes over at
  its next attempt instead of waiting the lease out (`leader_released` event).
- `Fence`: the daemon's store checks it at the start of every write transaction
  (`Store.write`): the row, read FOR SHARE on PostgreSQL, must still carry this process's epoch
  and be unexpired, or the transaction raises `LeaseLost` before writing anything. Because a
  take must update the row, it waits for fenced transactions in flight to end: no write of the
  old leader commits after a new leader's take.

Time: PostgreSQL's `now()` (one clock for every host; the transaction's start, which is fine for
transactions this short). SQLite's database is a file on this host, and the single-writer lock
lets one daemon open it: its clock is this host's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from tpucared.core.leadership.lease import (
    Holder,
    Lease,
    Step,
    expired,
    expires,
    next_step,
)
from tpucared.store.errors import LeaseLost
from tpucared.store.models import LeaderLeaseRow
from tpucared.store.reads import lease_record, read_lease
from tpucared.store.write_base import WriterBase, event_row

LEADER_CHANGED = "leader_changed"
LEADER_RELEASED = "leader_released"

_ROW = LeaderLeaseRow.__table__.c


async def database_now(conn: AsyncConnection) -> datetime:
    """The database's clock (module docstring)."""
    if conn.dialect.name == "postgresql":
        now = await conn.scalar(select(func.now()))
        assert isinstance(now, datetime)
        return now.astimezone(UTC)
    return datetime.now(UTC)


@dataclass(frozen=True)
class Attempt:
    """What one attempt found and did: `step` is what it did (WAIT also when a take or renew
    lost its compare-and-set), `lease` the row after it, `now` the database's clock."""

    step: Step
    lease: Lease
    now: datetime
    previous: Lease


def _who(holder: Holder | None) -> str:
    return "nobody" if holder is None else f"{holder.host} (pid {holder.pid})"


class LeaseWrites(WriterBase):
    async def attempt_lease(self, me: Holder, my_epoch: int | None, lease_s: float) -> Attempt:
        """Take or renew the lease, or find it held (module docstring)."""
        now = await database_now(self._conn)
        before = await read_lease(self._conn)
        step = next_step(before, me, my_epoch, now)
        holder = {"holder_host": me.host, "holder_pid": me.pid, "holder_instance": me.instance}
        if step is Step.RENEW:
            stmt = (
                update(LeaderLeaseRow)
                .where(_ROW.id == 1, _ROW.epoch == my_epoch, _ROW.holder_instance == me.instance)
                .values(renewed_at=now, expires_at=expires(now, lease_s))
            )
        elif step is Step.TAKE:
            stmt = (
                update(LeaderLeaseRow)
                .where(
                    _ROW.id == 1,
                    _ROW.epoch == before.epoch,
                    or_(
                        _ROW.holder_instance.is_(None),
                        _ROW.holder_instance == me.instance,
                        _ROW.expires_at.is_(None),
                        _ROW.expires_at <= now,
                    ),
                )
                .values(
                    epoch=before.epoch + 1,
                    acquired_at=now,
                    renewed_at=now,
                    expires_at=expires(now, lease_s),
                    **holder,
                )
            )
        else:
            return Attempt(step, before, now, before)
        if (await self._conn.execute(stmt)).rowcount != 1:
            # Another process changed the row since it was read: it won; nothing was written.
            return Attempt(Step.WAIT, await read_lease(self._conn), now, before)
        after = await read_lease(self._conn)
        if step is Step.TAKE:
            await self._leader_changed(before, after, now)
        return Attempt(step, after, now, before)

    async def _leader_changed(self, before: Lease, after: Lease, now: datetime) -> None:
        assert after.holder is not None
        if before.holder is None:
            was = "the first leader on this database"
        elif before.holder == after.holder:
            was = "again, in a new term"
        elif before.expires_at is not None and before.renewed_at == before.expires_at:
            was = f"after {_who(before.holder)} released it"
        else:
            was = f"after the lease of {_who(before.holder)} expired"
        details = {
            "host": after.holder.host,
            "pid": after.holder.pid,
            "instance": after.holder.instance,
            "epoch": after.epoch,
            "previous": None
            if before.holder is None
            else {
                "host": before.holder.host,
                "pid": before.holder.pid,
                "instance": before.holder.instance,
                "epoch": before.epoch,
            },
        }
        message = f"{_who(after.holder)} leads (epoch {after.epoch}), {was}"
        self._events_rows([event_row(LEADER_CHANGED, message, now, details=details)])

    async def release_lease(self, me: Holder, epoch: int) -> bool:
        """Give the lease up at a clean stop; False when it was no longer ours."""
        now = await database_now(self._conn)
        stmt = (
            update(LeaderLeaseRow)
            .where(
                _ROW.id == 1,
                _ROW.epoch == epoch,
                _ROW.holder_instance == me.instance,
                _ROW.expires_at > now,
            )
            .values(renewed_at=now, expires_at=now)
        )
        if (await self._conn.execute(stmt)).rowcount != 1:
            return False
        details = {"host": me.host, "pid": me.pid, "instance": me.instance, "epoch": epoch}
        message = f"{_who(me)} released the lease (epoch {epoch}): a standby may take it now"
        self._events_rows([event_row(LEADER_RELEASED, message, now, details=details)])
        return True


class Fence:
    """The epoch this process leads under (None: it does not lead), checked by `Store.write`
    at the start of every write transaction; the runtime's lease keeper sets it. `on_lost` is
    told when a check finds the lease gone, so the daemon stands by at once."""

    def __init__(self, on_lost: Callable[[str], None] | None = None) -> None:
        self.epoch: int | None = None
        self.on_lost = on_lost

    async def check(self, conn: AsyncConnection) -> None:
        epoch = self.epoch
        if epoch is None:
            raise LeaseLost("this process does not lead: it writes nothing but its lease")
        now, lease = await _now_and_lease(conn)
        if lease.epoch == epoch and not expired(lease, now):
            return
        why = (
            f"the lease is at epoch {lease.epoch}, held by {_who(lease.holder)}"
            if lease.epoch != epoch
            else f"the lease of epoch {epoch} expired"
        )
        if self.epoch == epoch:
            self.epoch = None
            if self.on_lost is not None:
                self.on_lost(why)
        raise LeaseLost(f"not the leader any more (epoch {epoch}): {why}")


async def _now_and_lease(conn: AsyncConnection) -> tuple[datetime, Lease]:
    """The database's clock and the lease row FOR SHARE: on PostgreSQL in one round trip, as
    every write transaction of the leader begins with it."""
    if conn.dialect.name != "postgresql":
        return await database_now(conn), await read_lease(conn, for_share=True)
    stmt = (
        select(LeaderLeaseRow.__table__, func.now().label("db_now"))
        .where(_ROW.id == 1)
        .with_for_update(read=True)
    )
    row = (await conn.execute(stmt)).mappings().one()
    now = row["db_now"]
    assert isinstance(now, datetime)
    return now.astimezone(UTC), lease_record(row)
