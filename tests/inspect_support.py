"""A realistic state database for the status/events/metrics/HTTP tests, written through the
store's own API (the same writes the daemon makes), and the CLI run as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.records import (
    AttemptOutcome,
    FleetRecord,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.vocab.actions import CloudFacts, SlotUpdate
from tpucared.store import Snapshot, Store
from tpucared.store.migrate import upgrade_to_head
from tpucared.store.snapshot import frozen_mapping

P = NodePhase
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
CAPACITY_ERROR = (
    'There is no more capacity in the zone "us-central2-b"; you can try in another zone\n'
    "where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)"
)


def facts(state: str, at: datetime, *, health: str | None = None, workers: int = 0) -> CloudFacts:
    return CloudFacts(
        cloud_state=state,
        cloud_state_since=at,
        health=health,
        unhealthy_since=None,
        cloud_id="4242",
        create_time=at,
        endpoints=tuple(WorkerEndpoint(i, f"10.0.0.{i + 1}") for i in range(workers)) or None,
    )


def preempted(fleet: str, slot: int) -> SlotUpdate:
    """What the planner writes with a serving node's death (core.budget.node_died)."""
    return SlotUpdate(
        fleet=fleet,
        slot=slot,
        create_failures=0,
        next_create_at=None,
        next_zone=None,
        last_error=None,
        add_preemptions=1,
    )


@dataclass(frozen=True)
class Scenario:
    """When things happened, relative to `now` (real time, so the CLI's uptime is known)."""

    now: datetime
    start: datetime  # fleets recorded
    died: datetime  # sweep-0's first node preempted
    ready: datetime  # its replacement READY


def spec_json(name: str, workload: bool) -> str:
    # The shape of core.slots.spec_json: goodput looks only at "workload".
    return json.dumps({"name": name, "workload": {"run": "train"} if workload else None})


async def populate(db: Path, now: datetime | None = None) -> Scenario:
    """Fleet `sweep` (3 slots, with a workload): slot 0 was preempted once and runs attempt 2
    on its second node, READY for 2h05m30s; slot 1 waits for capacity; slot 2 has no node.
    Fleet `eval` (1 slot, no workload) is down: its node deleted, the slot done."""
    now = now or datetime.now(UTC).replace(microsecond=0)
    s = Scenario(
        now=now,
        start=now - timedelta(hours=3),
        died=now - timedelta(hours=2, minutes=10),
        ready=now - timedelta(hours=2, minutes=5, seconds=30),
    )
    await upgrade_to_head(db)
    async with Store.open(db) as store, store.write() as tx:
        for name, size, workload in (("sweep", 3, True), ("eval", 1, False)):
            await tx.record_fleet(name, f"hash-{name}", spec_json(name, workload), s.start)
            await tx.ensure_slots(name, size, s.start)
        # sweep/0: first node READY, attempt 1, preempted, deleted.
        t = s.start
        a = await tx.request_node("sweep", 0, "sweep-0", "us-central2-b", "v4-32", t)
        a = await tx.transition(a.id, P.REQUESTED, P.CREATING, t)
        a = await tx.transition(a.id, P.CREATING, P.READY, t, cloud=facts("READY", t, workers=4))
        first = await tx.start_attempt(a.id, t)
        await tx.transition(
            a.id,
            P.READY,
            P.DEAD,
            s.died,
            reason="sweep-0: preempted",
            end_reason="preempted",
            cloud=facts("PREEMPTED", s.died),
            slot_update=preempted("sweep", 0),
            cause=LossCause.PREEMPTED,
        )
        await tx.finish_attempt(first.id, AttemptOutcome.PREEMPTED, s.died)
        await tx.begin_delete(a.id, P.DEAD, s.died + timedelta(seconds=2))
        await tx.transition(a.id, P.DELETING, P.DELETED, s.died + timedelta(seconds=40))
        # sweep/0: the replacement, READY with a running attempt 2, health degraded.
        b = await tx.request_node("sweep", 0, "sweep-0", "us-central2-b", "v4-32", s.died)
        b = await tx.transition(b.id, P.REQUESTED, P.CREATING, s.died)
        ready = facts("READY", s.ready, health="UNHEALTHY_MAINTENANCE", workers=4)
        b = await tx.transition(b.id, P.CREATING, P.READY, s.ready, cloud=ready)
        await tx.start_attempt(b.id, s.ready + timedelta(seconds=20))
        # sweep/1: waiting for capacity.
        c = await tx.request_node("sweep", 1, "sweep-1", "us-central2-b", "v4-32", s.start)
        await tx.update_slot("sweep", 1, s.start, last_error=CAPACITY_ERROR)
        assert c.phase is P.REQUESTED
        # eval/0: used, then the fleet went down.
        e = await tx.request_node("eval", 0, "eval-0", "us-east1-d", "v2-8", s.start)
        await tx.transition(e.id, P.REQUESTED, P.READY, s.start, cloud=facts("READY", s.start))
        await tx.set_fleet_down("eval", True, s.died)
        await tx.begin_delete(e.id, P.READY, s.died, end_reason="fleet down")
        await tx.transition(e.id, P.DELETING, P.DELETED, s.died + timedelta(seconds=30))
        await tx.update_slot("eval", 0, s.died, done=True)
    return s


def snapshot(
    *,
    running: bool = False,
    ready: bool = True,
    done: bool = False,
    workload: bool = True,
    down: bool = False,
) -> Snapshot:
    """In memory: fleet `f` with slot 0, a live node and its last workload attempt."""
    fleet = FleetRecord("f", "h1" if workload else "h2", spec_json("f", workload), T0, down=down)
    slot = SlotRecord("f", 0, "run", done=done)
    node = IncarnationRecord(
        1, "f", 0, "f-0", "z", "v4-8", P.READY if ready else P.CREATING, T0, T0
    )
    attempt = WorkloadAttemptRecord(
        1, "f", 0, 1, 1, T0, None if running else T0, None if running else AttemptOutcome.FAILED
    )
    return Snapshot(
        fleets=frozen_mapping({"f": fleet}),
        slots=frozen_mapping({("f", 0): slot}),
        nodes=frozen_mapping({("f", 0, 0): node}),
        last_attempts=frozen_mapping({("f", 0): attempt}),
    )


def cli(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """`python -m tpucared ARGS` in a clean environment; its stdout."""
    proc = run_cli(*args, env=env)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc.stdout


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpucared", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(env),
    )


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # No TPUCARED_* from the developer's shell: the tests say where the database is.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUCARED_")}
    return {**env, **(extra or {})}
