"""The maintenance task's pass (runtime/maintenance.py) over a real SQLite file: old events
go in small batches, stale zone health rows and the host-key pins of ended incarnations are
dropped, and what is current stays."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from store_support import T0, facts, open_raw

from bench import daemon_config
from tpucared.config import load_config
from tpucared.core.model.records import NodePhase
from tpucared.runtime.maintenance import Maintenance, Pruned
from tpucared.store import Store
from tpucared.store.snapshot import ZoneHealth

P = NodePhase
NOW = T0 + timedelta(days=40)
GCP = {"project": "proj-a", "endpoint": "http://127.0.0.1:9", "credentials": "none"}


class FixedClock:
    def now(self):  # type: ignore[no-untyped-def]
        return NOW

    def monotonic(self) -> float:
        return 0.0

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _maintenance(
    store: Store, tmp_path: Path, retention: str = "", batch: int = 500
) -> Maintenance:
    path = tmp_path / "fleet.toml"
    path.write_text(daemon_config.render(daemon_config.minimal(daemon=retention, gcp=GCP)))
    return Maintenance(store, load_config(path), FixedClock(), batch=batch, pause=0)  # type: ignore[arg-type]


async def _events(store: Store, old: int, new: int) -> None:
    async with store.write() as tx:
        for i in range(old):
            await tx.append_event("test.old", f"old {i}", T0 + timedelta(seconds=i))
        for i in range(new):
            await tx.append_event("test.new", f"new {i}", NOW - timedelta(days=1, seconds=-i))


def _kinds(path: Path) -> dict[str, int]:
    with open_raw(path) as db:
        return dict(db.execute("SELECT kind, count(*) FROM events GROUP BY kind").fetchall())


async def test_old_events_go_in_batches_and_new_ones_stay(
    store: Store, migrated: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _events(store, old=2_345, new=7)
    maintenance = _maintenance(store, tmp_path, batch=500)
    sizes: list[int] = []
    original = maintenance._batches

    async def counted(step, stop):  # type: ignore[no-untyped-def]
        async def recorded(tx):  # type: ignore[no-untyped-def]
            n = await step(tx)
            sizes.append(n)
            return n

        return await original(recorded, stop)

    maintenance._batches = counted  # type: ignore[method-assign]
    done = await maintenance.prune()
    assert done.events == 2_345
    assert _kinds(migrated) == {"test.new": 7}
    assert max(sizes) <= 500
    assert sizes[:5] == [500, 500, 500, 500, 345]  # five transactions for the backlog
    assert await maintenance.prune() == Pruned()  # nothing left: a pass after is a no-op


async def test_never_keeps_every_event(store: Store, migrated: Path, tmp_path: Path) -> None:
    await _events(store, old=50, new=1)
    done = await _maintenance(store, tmp_path, 'events_retention = "never"').prune()
    assert done.events == 0
    assert _kinds(migrated) == {"test.old": 50, "test.new": 1}


async def test_a_longer_retention_keeps_more(store: Store, migrated: Path, tmp_path: Path) -> None:
    await _events(store, old=10, new=3)
    done = await _maintenance(store, tmp_path, 'events_retention = "60d"').prune()
    assert done.events == 0  # T0 is 40 days before NOW
    assert _kinds(migrated) == {"test.old": 10, "test.new": 3}


async def test_zones_no_fleet_lists_are_forgotten(store: Store, tmp_path: Path) -> None:
    async with store.write() as tx:
        for project, zone in [
            ("proj-a", "us-central2-b"),
            ("proj-a", "europe-west4-a"),
            ("old", "us-central2-b"),
        ]:
            await tx.save_zone_health(ZoneHealth(project, zone, failures=2), T0)
    done = await _maintenance(store, tmp_path).prune()
    assert done.zones == 2
    async with store.read() as r:
        assert [(z.project, z.zone) for z in await r.zone_health()] == [("proj-a", "us-central2-b")]


async def test_pins_of_ended_incarnations_are_cleared(
    seeded: Store, migrated: Path, tmp_path: Path
) -> None:
    async with seeded.write() as tx:
        live = await tx.request_node("sweep", 0, "sweep-0", "z-a", "v4-32", T0)
        ended = await tx.request_node("sweep", 1, "sweep-1", "z-a", "v4-32", T0)
        for inc in (live, ended):
            await tx.transition(inc.id, P.REQUESTED, P.READY, T0, cloud=facts(workers=2))
            await tx.pin_host_keys(inc.id, 0, ["ssh-ed25519 AAA0"])
            await tx.pin_host_keys(inc.id, 1, ["ssh-ed25519 AAA1"])
        await tx.transition(ended.id, P.READY, P.DEAD, T0, end_reason="preempted")
        await tx.transition(ended.id, P.DEAD, P.DELETED, T0)
    done = await _maintenance(seeded, tmp_path, batch=1).prune()
    assert done.pins == 2  # one worker per transaction
    with open_raw(migrated) as db:
        rows = db.execute("SELECT node_id, worker, host_keys FROM workers ORDER BY 1, 2").fetchall()
    assert [tuple(r) for r in rows] == [
        (live.id, 0, '["ssh-ed25519 AAA0"]'),
        (live.id, 1, '["ssh-ed25519 AAA1"]'),
        (ended.id, 0, "[]"),  # the addresses stay for the history queries; the keys go
        (ended.id, 1, "[]"),
    ]


async def test_run_stops_promptly_and_survives_a_failing_pass(store: Store, tmp_path: Path) -> None:
    maintenance = _maintenance(store, tmp_path)
    calls = 0

    async def failing(stop: asyncio.Event | None = None) -> Pruned:
        nonlocal calls
        calls += 1
        raise RuntimeError("disk I/O error")

    maintenance.prune = failing  # type: ignore[method-assign]
    maintenance._interval = 0.01
    stop = asyncio.Event()
    runner = asyncio.create_task(maintenance.run(stop))
    await asyncio.sleep(0.2)
    assert not runner.done()  # a failing pass is logged and retried, never the task's end
    assert calls >= 2
    stop.set()
    await asyncio.wait_for(runner, 2)
