"""Compute Engine operations followed with zoneOperations.wait (issue 44): the real daemon in
this process, a Compute Engine fleet over the real `ComputeCloud` against the emulator on
loopback, requests counted in the emulator's request log.

- a hunting slot's failing insert is seen with exactly one wait and no zoneOperations.get;
- a server that answers every wait at once, not DONE, still ends each operation, with a
  bounded number of waits (paced 1, 2 ... 5 s);
- beyond the watcher's bound of held waits, operations are polled with get;
- a stop with a wait held returns promptly.
The TPU API's path is unchanged: tests/runtime/nodes/test_hunting.py counts its polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from runtime_support import PROJECT, ZONE, query, wait_for, write_config
from workload_harness import daemon_in_process

from tpucared.config import load_config
from tpucared.gcp import NoAuth
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.gcp.tpu import TpuClient, TpuCloud
from tpucared.ports.cloud import OperationState
from tpucared.runtime.daemon import Daemon
from tpucared.runtime.nodes import op_waits
from tpucared_emulator import EmulatorServer

pytestmark = pytest.mark.timeout(90)

FLEET = "iron"
MACHINE = "tpu7x-standard-4t"
OPS = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/operations/"


class HeldWaits(ComputeCloud):
    """The real cloud, counting the waits it holds at once (the most, and now)."""

    held = 0
    most = 0

    async def wait(self, operation: str) -> OperationState:
        self.held += 1
        self.most = max(self.most, self.held)
        try:
            return await super().wait(operation)
        finally:
            self.held -= 1


@contextlib.asynccontextmanager
async def compute_daemon(
    emulator: EmulatorServer, tmp_path: Path, size: int = 1
) -> AsyncIterator[tuple[Daemon, HeldWaits]]:
    """The daemon with `size` slots of a spot Compute Engine fleet, hunting at a 1 s pace."""
    path = write_config(
        tmp_path,
        emulator.url,
        size=size,
        fleet=FLEET,
        poll="10s",
        policy={"capacity_backoff": "1s", "capacity_backoff_cap": "1s"},
    )
    config = load_config(path)
    config = replace(
        config,
        fleets=tuple(
            replace(f, api="compute", accelerator_type=MACHINE, extra={"runtime_version": ""})
            for f in config.fleets
        ),
    )
    compute = HeldWaits(
        ComputeClient(emulator.url, token_source=NoAuth()), owner=config.daemon.owner
    )
    clouds = {"tpu": TpuCloud(TpuClient(emulator.url, token_source=NoAuth())), "compute": compute}
    try:
        async with daemon_in_process(config, clouds, PROJECT) as daemon:
            yield daemon, compute
    finally:
        for cloud in clouds.values():
            await cloud.aclose()


def operation_reads(emulator: EmulatorServer) -> tuple[Counter[str], Counter[str]]:
    """(waits, gets) of zone operations, by operation."""
    waits: Counter[str] = Counter()
    gets: Counter[str] = Counter()
    for r in emulator.requests.entries():
        path = str(r["path"])
        if not path.startswith(OPS):
            continue
        name = path.removeprefix(OPS).removesuffix("/wait")
        if r["method"] == "POST" and path.endswith("/wait"):
            waits[name] += 1
        elif r["method"] == "GET":
            gets[name] += 1
    return waits, gets


def inserts(emulator: EmulatorServer) -> int:
    return sum(
        1
        for r in emulator.requests.entries()
        if r["method"] == "POST" and str(r["path"]).endswith(f"/zones/{ZONE}/instances")
    )


async def hunt(emulator: EmulatorServer, tmp_path: Path, attempts: int) -> None:
    """A lone slot hunts through a stockout until `attempts` failed creates are recorded."""
    emulator.state.set_capacity(ZONE, MACHINE, 0)
    db = tmp_path / "state.db"
    async with compute_daemon(emulator, tmp_path) as (daemon, _):
        run = asyncio.create_task(daemon.run(drain_timeout=2.0))

        async def failed() -> bool:
            assert not run.done(), "the daemon stopped"
            rows = query(db, "SELECT outcome FROM create_attempts")
            assert all(r["outcome"] == "capacity" for r in rows), rows
            return len(rows) >= attempts

        await wait_for(failed, 40, f"{attempts} failed creates")
        daemon.stop.set()
        assert await run == 0


@pytest.mark.parametrize("emulator_options", [{"create_seconds": 1.0}], indirect=False)
async def test_a_failing_insert_is_seen_with_one_wait_and_no_get(
    emulator: EmulatorServer, tmp_path: Path
) -> None:
    await hunt(emulator, tmp_path, attempts=3)
    waits, gets = operation_reads(emulator)
    recorded = len(query(tmp_path / "state.db", "SELECT id FROM create_attempts"))
    assert not gets, gets
    assert set(waits.values()) == {1}, waits  # one wait per operation
    # Each recorded outcome came from its operation's one wait (the last insert's wait may
    # have been cut by the stop).
    assert recorded <= len(waits) <= inserts(emulator), (recorded, waits)


@pytest.mark.parametrize(
    "emulator_options",
    [{"create_seconds": 1.0, "compute_wait_early_return_probability": 1.0}],
    indirect=False,
)
async def test_waits_answered_at_once_still_end_each_operation_paced(
    emulator: EmulatorServer, tmp_path: Path
) -> None:
    # Every wait answers at once, not DONE; the insert fails 0.5 s after it is sent. The
    # next wait goes 1 s after the first, and finds it DONE: 2 waits, never a get.
    await hunt(emulator, tmp_path, attempts=3)
    waits, gets = operation_reads(emulator)
    assert not gets, gets
    finished = [n for n, count in waits.items() if count >= 2]
    assert len(finished) >= 3, waits
    assert max(waits.values()) <= 3, waits


@pytest.mark.parametrize("emulator_options", [{"create_seconds": 2.0}], indirect=False)
async def test_operations_beyond_the_held_waits_bound_are_polled_with_get(
    emulator: EmulatorServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(op_waits, "MAX_HELD_WAITS", 1)
    db = tmp_path / "state.db"
    async with compute_daemon(emulator, tmp_path, size=3) as (daemon, compute):
        run = asyncio.create_task(daemon.run(drain_timeout=2.0))

        async def made() -> bool:
            assert not run.done(), "the daemon stopped"
            rows = query(db, "SELECT outcome FROM create_attempts")
            return len(rows) >= 3

        await wait_for(made, 40, "3 creates that succeeded")
        daemon.stop.set()
        assert await run == 0
    waits, gets = operation_reads(emulator)
    assert compute.most == 1, compute.most  # never two waits held at once
    assert waits, "the first insert is waited on"
    # The other two inserts, sent in the same tick, found no place: polled with get (and
    # waited on once a place freed, at a later poll).
    assert len(gets) >= 2, (waits, gets)
    rows = query(db, "SELECT outcome FROM create_attempts")
    assert [r["outcome"] for r in rows] == ["ok"] * 3


@pytest.mark.parametrize(
    "emulator_options",
    [{"create_seconds": 60.0, "compute_wait_max_seconds": 8.0}],
    indirect=False,
)
async def test_a_stop_with_a_wait_held_is_prompt(emulator: EmulatorServer, tmp_path: Path) -> None:
    # The emulator holds the wait 8 s (its handler runs on after the client leaves, which
    # the teardown waits for); the stop must not wait for it.
    async with compute_daemon(emulator, tmp_path) as (daemon, compute):
        run = asyncio.create_task(daemon.run(drain_timeout=2.0))

        async def held() -> bool:
            assert not run.done(), "the daemon stopped"
            return compute.held == 1

        await wait_for(held, 30, "the insert's wait held")
        stopping = time.monotonic()
        daemon.stop.set()
        assert await asyncio.wait_for(run, 10) == 0
        took = time.monotonic() - stopping
    assert compute.held == 0
    assert took < 3.0, took


def test_the_next_wait_is_paced_from_the_previous_send() -> None:
    assert op_waits.next_wait_in(1, 0.0) == 1.0  # an answer at once: 1 s, then 2 ... 5
    assert op_waits.next_wait_in(3, 0.5) == 2.5
    assert op_waits.next_wait_in(9, 0.0) == op_waits.WAIT_PACE_CAP_S
    assert op_waits.next_wait_in(1, 120.0) == 0.0  # held its full time: again at once


def test_wait_places_are_bounded_and_freed() -> None:
    places = op_waits.WaitPlaces(limit=2)
    assert places.take("a")
    assert places.take("b")
    assert places.take("a")  # held already
    assert not places.take("c")
    places.release("a")
    assert places.take("c")
    assert len(places) == 2
