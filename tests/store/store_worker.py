"""Subprocess workers for the store tests: `python store_worker.py MODE DB [ARGS]`.

migrate   print "waiting", wait for a line on stdin, upgrade DB to head, print it.
crash     a daemon-like writer doing random transactions forever (killed by the test);
          prints "commit <seq>" after each commit.
daemon    a writer doing transitions and events for ARGS[0] seconds.
reader    a CLI-like reader doing snapshots, status and event follows for ARGS[0] seconds.
toggler   a CLI-like occasional writer (`tpucared down` and back) for ARGS[0] seconds.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from store_support import T0, facts, seed, slot_update

from tpucared.core.model.lifecycle import TRANSITIONS
from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, NodePhase
from tpucared.store import (
    AttemptRunning,
    LiveIncarnationExists,
    StaleWrite,
    Store,
    Tx,
)

P = NodePhase
FLEETS = {"alpha": 3, "beta": 2}


async def migrate(db: str) -> None:
    from tpucared.store.migrate import upgrade_to_head  # only this mode needs Alembic

    print("waiting", flush=True)
    sys.stdin.readline()  # start together with the other migrators
    print(await upgrade_to_head(db), flush=True)


class Writer:
    """Random but legal daemon work; every transaction ends with a numbered commit marker."""

    def __init__(self, store: Store, rng: random.Random, run: str) -> None:
        self.store = store
        self.rng = rng
        self.run = run
        self.seq = 0
        self.now = T0

    async def setup(self) -> None:
        for fleet, size in FLEETS.items():
            await seed(self.store, fleet, size, self.now)  # idempotent

    async def step(self) -> None:
        self.now += timedelta(seconds=1)
        self.seq += 1
        snap = await self.store.load_snapshot()
        fleet = self.rng.choice(sorted(FLEETS))
        slot = self.rng.randrange(FLEETS[fleet])
        node = snap.nodes.get((fleet, slot, 0))
        try:
            async with self.store.write() as tx:
                await self._act(tx, fleet, slot, node, snap.last_attempts.get((fleet, slot)))
                await tx.append_event(
                    "test.commit", self.run, self.now, details={"run": self.run, "seq": self.seq}
                )
        except (StaleWrite, LiveIncarnationExists, AttemptRunning):
            self.seq -= 1  # rolled back: the marker was not written either
            return
        print(f"commit {self.seq}", flush=True)

    async def _act(self, tx: Tx, fleet: str, slot: int, node, attempt) -> None:  # type: ignore[no-untyped-def]
        rng, now = self.rng, self.now
        roll = rng.random()
        if roll < 0.15:
            # A batch of events in one transaction: all or nothing.
            size = rng.randint(2, 30)
            batch = f"{self.run}-{self.seq}"
            for i in range(size):
                await tx.append_event(
                    "test.batch", f"{i}", now, details={"batch": batch, "size": size}
                )
            return
        if node is None:
            inc = await tx.request_node(fleet, slot, f"{fleet}-{slot}", "z-a", "v4-8", now)
            if rng.random() < 0.5:
                await tx.record_create_attempt(
                    CreateAttemptRecord(
                        fleet, slot, "z-a", "v4-8", now, "capacity", 1.0, "no", inc.id
                    )
                )
                await tx.transition(
                    inc.id,
                    P.REQUESTED,
                    P.FAILED,
                    now,
                    slot_update=slot_update(fleet, slot, create_failures=rng.randint(1, 9)),
                )
            return
        if node.phase is P.READY and rng.random() < 0.5:
            if attempt is None or attempt.ended_at is not None:
                await tx.start_attempt(node.id, now)
            else:
                outcome = rng.choice(list(AttemptOutcome))
                await tx.finish_attempt(attempt.id, outcome, now, exit_codes={0: 1, 1: None})
            return
        if node.phase in (P.DEAD, P.DELETING) and rng.random() < 0.6:
            await tx.begin_delete(node.id, node.phase, now, end_reason="test")
            return
        if rng.random() < 0.2:
            await tx.record_cloud(
                node.id, node.phase, facts(rng.choice(["READY", "REPAIRING"]), now, workers=2), now
            )
            return
        new = rng.choice(sorted(TRANSITIONS[node.phase]))
        preempted = new is P.DEAD and rng.random() < 0.7
        if attempt is not None and attempt.ended_at is None and new is not P.READY:
            await tx.finish_attempt(attempt.id, AttemptOutcome.PREEMPTED, now)
        await tx.transition(
            node.id,
            node.phase,
            new,
            now,
            end_reason="preempted" if preempted else "test",
            cloud=facts("READY", now, workers=2) if new is P.READY else None,
            slot_update=slot_update(
                fleet, slot, add_preemptions=int(preempted), create_failures=rng.randint(0, 3)
            ),
        )


async def crash(db: str, seed_value: str, run: str) -> None:
    async with Store.open(db) as store:
        writer = Writer(store, random.Random(int(seed_value)), run)
        await writer.setup()
        while True:
            await writer.step()


async def daemon(db: str, seconds: str) -> None:
    async with Store.open(db) as store:
        writer = Writer(store, random.Random(7), "daemon")
        await writer.setup()
        print("ready", flush=True)
        deadline = time.monotonic() + float(seconds)
        while time.monotonic() < deadline:
            await writer.step()
        print(f"wrote {writer.seq}", flush=True)


async def reader(db: str, seconds: str) -> None:
    """Reads the way `tpucared status` / `events --follow` do, checking what it sees."""
    async with Store.open(db) as store:
        deadline = time.monotonic() + float(seconds)
        last_id, reads = 0, 0
        while time.monotonic() < deadline:
            snap = await store.load_snapshot()
            for key, node in snap.nodes.items():
                assert key[:2] in snap.slots, key  # one consistent view: the slot is there
                assert node.phase in (P.REQUESTED, P.CREATING, P.READY, P.DEAD, P.DELETING)
            await store.status()
            events = await store.events(since_id=last_id, limit=500)
            ids = [e.id for e in events]
            assert ids == sorted(ids)
            assert not ids or ids[0] > last_id
            last_id = ids[-1] if ids else last_id
            reads += 1
        print(f"reads {reads} last_event {last_id}", flush=True)


async def toggler(db: str, seconds: str) -> None:
    async with Store.open(db) as store:
        deadline = time.monotonic() + float(seconds)
        flips = 0
        while time.monotonic() < deadline:
            async with store.write() as tx:
                fleet = await tx.fleet("beta")
                if fleet is not None:
                    await tx.set_fleet_down("beta", not fleet.down, T0)
                    flips += 1
            await asyncio.sleep(0.01)
        print(f"flips {flips}", flush=True)


MODES = {"migrate": migrate, "crash": crash, "daemon": daemon, "reader": reader, "toggler": toggler}

if __name__ == "__main__":
    asyncio.run(MODES[sys.argv[1]](*sys.argv[2:]))
