"""The leader lease in the database (store/lease.py), on SQLite and PostgreSQL: the first
attempt takes it, the holder renews, another waits while it is held and takes it once expired,
two takers at once make one leader (compare-and-set on the epoch), a release lets a standby
take it at once, each change of leader is an event, and the fence refuses the writes of a
process that no longer leads, having written nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL
from store_support import ENGINES, T0

from tpucared.core.leadership.lease import Holder, Step
from tpucared.store import Store
from tpucared.store.errors import LeaseLost
from tpucared.store.lease import LEADER_CHANGED, LEADER_RELEASED, Fence

A = Holder("vm-a", 100, "a" * 36)
B = Holder("vm-b", 200, "b" * 36)


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def other(store: Store, store_db: Path | URL) -> AsyncIterator[Store]:
    """A second process's store on the same database (its own engine and connections)."""
    s = Store.open(store_db)
    try:
        yield s
    finally:
        await s.close()


async def attempt(store: Store, me: Holder, epoch: int | None, lease_s: float) -> Step:
    async with store.write(fenced=False) as tx:
        return (await tx.attempt_lease(me, epoch, lease_s)).step


async def test_take_renew_wait_then_take_after_expiry(store: Store, other: Store) -> None:
    assert await attempt(store, A, None, 0.5) is Step.TAKE
    lease = await store.leader_lease()
    assert lease is not None
    assert lease.holder == A
    assert lease.epoch == 1
    assert lease.acquired_at == lease.renewed_at
    assert lease.expires_at is not None
    assert lease.renewed_at is not None
    assert abs((lease.expires_at - lease.renewed_at).total_seconds() - 0.5) < 0.01
    assert await attempt(other, B, None, 0.5) is Step.WAIT
    assert await attempt(store, A, 1, 0.5) is Step.RENEW
    renewed = await store.leader_lease()
    assert renewed is not None
    assert renewed.epoch == 1
    assert renewed.acquired_at == lease.acquired_at
    assert renewed.renewed_at is not None
    assert renewed.renewed_at >= lease.renewed_at
    await asyncio.sleep(0.6)
    assert await attempt(other, B, None, 0.5) is Step.TAKE  # expired: taken, a new epoch
    stolen = await other.leader_lease()
    assert stolen is not None
    assert stolen.holder == B
    assert stolen.epoch == 2
    assert await attempt(store, A, 1, 0.5) is Step.WAIT  # the old leader finds it gone
    events = [e for e in await store.events() if e.kind == LEADER_CHANGED]
    assert [(e.details["host"], e.details["epoch"]) for e in events] == [("vm-a", 1), ("vm-b", 2)]
    assert events[1].details["previous"]["pid"] == 100
    assert "expired" in events[1].message


async def test_two_takers_at_once_make_one_leader(store: Store, other: Store) -> None:
    steps = await asyncio.gather(attempt(store, A, None, 5), attempt(other, B, None, 5))
    assert sorted(steps) == [Step.TAKE, Step.WAIT]
    lease = await store.leader_lease()
    assert lease is not None
    assert lease.epoch == 1
    assert [e.kind for e in await store.events()].count(LEADER_CHANGED) == 1


async def test_a_release_lets_a_standby_take_at_once(store: Store, other: Store) -> None:
    assert await attempt(store, A, None, 60) is Step.TAKE
    async with store.write(fenced=False) as tx:
        assert await tx.release_lease(A, 1)
    async with store.write(fenced=False) as tx:
        assert not await tx.release_lease(A, 1)  # once
    assert await attempt(other, B, None, 60) is Step.TAKE
    kinds = [e.kind for e in await store.events()]
    assert kinds == [LEADER_CHANGED, LEADER_RELEASED, LEADER_CHANGED]
    assert "released" in (await store.events())[-1].message


async def test_a_leader_that_stood_down_takes_its_own_lease_in_a_new_term(store: Store) -> None:
    assert await attempt(store, A, None, 60) is Step.TAKE
    assert await attempt(store, A, None, 60) is Step.TAKE
    lease = await store.leader_lease()
    assert lease is not None
    assert lease.epoch == 2
    assert lease.holder == A


async def test_the_fence_refuses_the_writes_of_a_leader_that_lost(
    store: Store, other: Store
) -> None:
    lost: list[str] = []
    store.fence = Fence(on_lost=lost.append)
    with pytest.raises(LeaseLost, match="does not lead"):
        async with store.write() as tx:
            await tx.append_event("test", "never written", T0)
    assert await attempt(store, A, None, 0.5) is Step.TAKE
    store.fence.epoch = 1
    async with store.write() as tx:
        await tx.append_event("test", "written by the leader", T0)
    await asyncio.sleep(0.6)
    assert await attempt(other, B, None, 60) is Step.TAKE
    with pytest.raises(LeaseLost, match="epoch 2, held by vm-b"):
        async with store.write() as tx:
            await tx.append_event("test", "never written", T0)
    assert store.fence.epoch is None
    assert len(lost) == 1
    messages = [e.message for e in await store.events() if e.kind == "test"]
    assert messages == ["written by the leader"]


async def test_an_expired_lease_fences_even_before_another_takes_it(store: Store) -> None:
    store.fence = Fence()
    assert await attempt(store, A, None, 0.3) is Step.TAKE
    store.fence.epoch = 1
    await asyncio.sleep(0.4)
    with pytest.raises(LeaseLost, match="expired"):
        async with store.write() as tx:
            await tx.append_event("test", "never written", T0)


async def test_a_take_waits_for_the_fenced_write_in_flight(store: Store, other: Store) -> None:
    """No write of the old leader commits after a new leader's take: the take waits."""
    store.fence = Fence()
    assert await attempt(store, A, None, 0.3) is Step.TAKE
    store.fence.epoch = 1
    async with store.write() as tx:
        await asyncio.sleep(0.4)  # expired meanwhile; the check was at the start
        taking = asyncio.create_task(attempt(other, B, None, 60))
        await asyncio.sleep(0.3)
        assert not taking.done()
        await tx.append_event("test", "the old leader's last write", T0)
    assert await taking is Step.TAKE
    events = await store.events()
    assert [e.kind for e in events][-2:] == ["test", LEADER_CHANGED]


async def test_writes_without_a_fence_are_not_checked(store: Store) -> None:
    """The CLI, `down`, the tests: no fence, no lease needed."""
    async with store.write() as tx:
        await tx.append_event("test", "written", T0)
    lease = await store.leader_lease()
    assert lease is not None
    assert lease.holder is None
    assert lease.epoch == 0
