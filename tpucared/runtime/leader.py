"""The leader lease, kept by every `tpucared run`: who may act, and stepping down.

`LeaseKeeper` tries the lease (store/lease.py; the rules in core/leadership/lease.py) every
`attempt_interval(lease)`, from its own task, so a long tick never delays a renewal. As a
standby it takes the lease once it is free; as the leader it renews it. It owns the store's
`Fence` (every write transaction checks the epoch) and `check()`, which the cloud calls run
before every mutating request: the lease must be held and this process's local deadline
(monotonic: the start of the last successful attempt + the lease - a margin) ahead. After a
pause (SIGSTOP, a frozen VM) the deadline has passed, so nothing goes out before the keeper
has asked the database again, and by then another epoch leads.

Losing the lease (taken by another, the deadline passed without a successful renewal, a
fenced write or call, or `step_down` when the database went away mid-term) sets the term's
`lost` event: the daemon stops its term (runtime/terms.py)
and stands by. On SQLite the single-writer lock already makes this process the only daemon:
it takes the lease at its first attempt, and the row only serves `status` and the events.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable

import structlog

from tpucared.core.leadership.lease import (
    Holder,
    Lease,
    Role,
    Step,
    attempt_interval,
    check_role_change,
    local_deadline,
    may_act,
)
from tpucared.store import Store
from tpucared.store.errors import LeaseLost
from tpucared.store.lease import Fence

log = structlog.get_logger(__name__)

RoleHook = Callable[[Role, int | None], None]  # (role, epoch), e.g. the role gauge


def this_process() -> Holder:
    return Holder(socket.gethostname(), os.getpid(), str(uuid.uuid4()))


class LeaseKeeper:
    def __init__(
        self,
        store: Store,
        lease_s: float,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        me: Holder | None = None,
        on_role: RoleHook | None = None,
        on_attempt: Callable[[Role, int], None] | None = None,
    ) -> None:
        self.store = store
        self.lease_s = lease_s
        self.me = me or this_process()
        self.role = Role.STANDBY
        self.epoch: int | None = None
        self.deadline: float | None = None  # monotonic: may act until then (module docstring)
        self.lease: Lease | None = None  # the row as the last attempt saw it
        self.leading = asyncio.Event()  # set while this process leads
        self.lost = asyncio.Event()  # the current term's end; a new one for every term
        # The real monotonic clock, not the daemon's injectable one: the lease is about real
        # pauses of this process and the database's real time (tests inject their own).
        self._monotonic = monotonic
        self._on_role = on_role
        # After every attempt the database answered: (role, the lease's epoch it saw).
        self._on_attempt = on_attempt
        self.fence = Fence(on_lost=self._lose)
        store.fence = self.fence
        self._failed_attempts = 0  # in a row: the first is a warning, the rest debug

    @property
    def interval(self) -> float:
        return attempt_interval(self.lease_s)

    def check(self) -> None:
        """Before a mutating cloud call: raise `LeaseLost` unless this process leads and its
        local deadline is ahead. Local only: no database round trip per call."""
        if may_act(self.role, self.deadline, self._monotonic()):
            return
        if self.role is Role.LEADER:
            self._lose("the local deadline passed without a renewal")
        raise LeaseLost(f"not the leader ({self.role}): no cloud call")

    async def attempt(self) -> None:
        """One try at the lease: take it, renew it, or find it held."""
        mine = self.epoch if self.role is Role.LEADER else None
        try:
            async with self.store.write(fenced=False) as tx:
                # Before the transaction's first statement, so before the database's `now`
                # that its expiry counts from: the local deadline comes first.
                started = self._monotonic()
                result = await tx.attempt_lease(self.me, mine, self.lease_s)
        except Exception as exc:  # the keeper must outlive any one attempt
            # A database down, a driver's own error class, a bug: all the same here. The next
            # attempt retries; the local deadline ends a leader's term meanwhile. Said once
            # per outage (a 30 s outage is not ten warnings), and again when it answers.
            self._failed_attempts += 1
            level = log.warning if self._failed_attempts == 1 else log.debug
            level("lease.attempt_failed", role=str(self.role), error=str(exc) or repr(exc),
                  failures=self._failed_attempts)  # fmt: skip
            self._expire_locally()
            return
        if self._failed_attempts:
            log.info("lease.attempt_answered", after_failures=self._failed_attempts)
            self._failed_attempts = 0
        self.lease = result.lease
        if result.step is Step.RENEW:
            self.deadline = local_deadline(started, self.lease_s)
        elif result.step is Step.TAKE:
            if self.role is Role.LEADER:  # my own term ran out: a new term, from the start
                self._lose("the lease expired before it was renewed")
            self._lead(result.lease.epoch, local_deadline(started, self.lease_s))
        elif self.role is Role.LEADER:
            holder = result.lease.holder
            who = "nobody" if holder is None else f"{holder.host} pid {holder.pid}"
            self._lose(f"the lease is at epoch {result.lease.epoch}, held by {who}")
        else:
            self._expire_locally()
        if self._on_attempt is not None:
            self._on_attempt(self.role, result.lease.epoch)

    def step_down(self, why: str) -> None:
        """End this process's term now (the database went away mid-term): it stands by, and
        takes the lease again at the first attempt the database answers (its own holder
        instance may, at once)."""
        self._lose(why)

    def _expire_locally(self) -> None:
        if self.role is Role.LEADER and not may_act(self.role, self.deadline, self._monotonic()):
            self._lose("the local deadline passed without a renewal")

    def _lead(self, epoch: int, deadline: float) -> None:
        self.role = check_role_change(self.role, Role.LEADER)
        self.epoch, self.deadline = epoch, deadline
        self.fence.epoch = epoch
        self.lost = asyncio.Event()
        self.leading.set()
        log.info("lease.leading", epoch=epoch, host=self.me.host, pid=self.me.pid)
        if self._on_role is not None:
            self._on_role(self.role, epoch)

    def _lose(self, why: str) -> None:
        if self.role is not Role.LEADER:
            return
        self.role = check_role_change(self.role, Role.STANDBY)
        log.warning("lease.lost", epoch=self.epoch, why=why)
        self.fence.epoch = None
        self.deadline = None
        self.leading.clear()
        self.lost.set()
        if self._on_role is not None:
            self._on_role(self.role, self.epoch)

    async def run(self, stop: asyncio.Event) -> None:
        """Attempt every `interval` until `stop`; as the leader, also wake at the local
        deadline, so a renewal that keeps failing ends the term on time."""
        while not stop.is_set():
            await self.attempt()
            wait = self.interval
            if self.role is Role.LEADER and self.deadline is not None:
                wait = min(wait, max(0.0, self.deadline - self._monotonic()) + 0.01)
            try:
                async with asyncio.timeout(wait):
                    await stop.wait()
            except TimeoutError:
                pass
            self._expire_locally()

    async def wait_leading(self, stop: asyncio.Event) -> bool:
        """Until this process leads (True) or `stop` is set (False)."""
        waits = [asyncio.ensure_future(self.leading.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return not stop.is_set() and self.role is Role.LEADER

    async def release(self) -> None:
        """At a clean stop: give the lease up, so a standby takes over at its next attempt."""
        role, epoch = self.role, self.epoch
        self.fence.epoch = None
        self.leading.clear()
        self.role = check_role_change(self.role, Role.STOPPED)
        if self._on_role is not None:
            self._on_role(self.role, epoch)
        if role is not Role.LEADER or epoch is None:
            return
        try:
            async with self.store.write(fenced=False) as tx:
                released = await tx.release_lease(self.me, epoch)
        except Exception as exc:  # the stop goes on: an unreleased lease expires by itself
            log.warning("lease.release_failed", hint="it expires by itself", error=repr(exc))
            return
        log.info("lease.released", epoch=epoch, ours=released)
