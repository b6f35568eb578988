"""The lease keeper (runtime/leader.py) over a real store, with its monotonic clock injected:
it leads after its first attempt on a free lease, lets calls through until its local deadline,
steps down (the term's `lost` set, the fence cleared) when the deadline passes or another
process takes the lease, takes it again in a new term, and releases it at the end. Runs on
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from tpucared.core.leadership.lease import Holder, Role
from tpucared.runtime.leader import LeaseKeeper
from tpucared.runtime.terms import keep_warm
from tpucared.store import Store
from tpucared.store.errors import LeaseLost
from tpucared.store.migrate import upgrade_to_head

OTHER = Holder("vm-b", 200, "b" * 36)


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    db: Path | URL = tmp_path / "state.db"
    if request.param == "postgresql":
        db = request.getfixturevalue("pg_url")
    await upgrade_to_head(db)
    async with Store.open(db) as s:
        yield s


async def test_lead_act_step_down_lead_again_release(store: Store) -> None:
    clock = Monotonic()
    roles: list[tuple[Role, int | None]] = []
    keeper = LeaseKeeper(store, 4.0, monotonic=clock, on_role=lambda r, e: roles.append((r, e)))
    with pytest.raises(LeaseLost):
        keeper.check()  # a standby calls nothing
    await keeper.attempt()
    assert (keeper.role, keeper.epoch, keeper.fence.epoch) == (Role.LEADER, 1, 1)
    first_term = keeper.lost
    keeper.check()
    async with store.write() as tx:  # fenced, and the fence lets the leader write
        await tx.append_event("test", "by the leader", store_now())
    clock.now += 3.0  # past 0.75 * lease with no renewal (a pause)
    with pytest.raises(LeaseLost):
        keeper.check()
    assert first_term.is_set()
    assert (keeper.role, keeper.fence.epoch) == (Role.STANDBY, None)
    with pytest.raises(LeaseLost):
        async with store.write() as tx:
            await tx.append_event("test", "never written", store_now())
    await keeper.attempt()  # still its own in the database: a new term
    assert (keeper.role, keeper.epoch) == (Role.LEADER, 2)
    assert not keeper.lost.is_set()
    await keeper.attempt()  # renewed
    assert keeper.epoch == 2
    await keeper.release()
    assert keeper.role is Role.STOPPED
    lease = await store.leader_lease()
    assert lease is not None
    assert lease.expires_at == lease.renewed_at  # released
    assert roles == [(Role.LEADER, 1), (Role.STANDBY, 1), (Role.LEADER, 2), (Role.STOPPED, 2)]


async def test_a_leader_whose_lease_was_taken_steps_down_at_its_next_attempt(
    store: Store,
) -> None:
    keeper = LeaseKeeper(store, 0.3, monotonic=Monotonic())
    await keeper.attempt()
    assert keeper.role is Role.LEADER
    await asyncio.sleep(0.4)  # expired in the database
    async with store.write(fenced=False) as tx:
        await tx.attempt_lease(OTHER, None, 60)
    await keeper.attempt()
    assert keeper.role is Role.STANDBY
    assert keeper.lost.is_set()
    await keeper.attempt()
    assert keeper.role is Role.STANDBY  # the other's, unexpired
    await keeper.release()  # a standby has nothing to release
    lease = await store.leader_lease()
    assert lease is not None
    assert lease.holder == OTHER


def store_now() -> datetime:
    return datetime.now(UTC)


async def test_a_standby_keeps_its_caches_warm_and_stops_once_it_leads(store: Store) -> None:
    # runtime/terms.py `keep_warm`: the standby reads the snapshot every interval, so the
    # store's record cache holds the fleet's records at takeover; a leader's ticks read it.
    keeper = LeaseKeeper(store, 4.0, monotonic=Monotonic())
    stopped = asyncio.Event()
    reads: list[Role] = []
    three = asyncio.Event()

    async def read() -> None:
        role = keeper.role  # the role the read was started under (it may lead by its end)
        await store.load_snapshot()
        reads.append(role)
        if len(reads) >= 3:
            three.set()

    task = asyncio.create_task(keep_warm(keeper, stopped, read, 0.02))
    await asyncio.wait_for(three.wait(), 5)
    await keeper.attempt()  # it leads now
    assert keeper.role is Role.LEADER
    before = len(reads)
    await asyncio.sleep(0.1)
    stopped.set()
    await asyncio.wait_for(task, 5)
    assert set(reads) == {Role.STANDBY}
    assert len(reads) <= before + 1  # at most the read that was already under way
    await keeper.release()
