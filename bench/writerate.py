"""Leader takeover (issue 15): the write rate PostgreSQL sustains for a 10,000-node fleet's
tick, against SQLite's, in one run.

`python -m bench.run --only writerate [--quick]` (or `python -m bench.writerate [--quick]
[--size N]`).

Method. One SQLite file per database (the embedded default: WAL, `synchronous = FULL`) and
one real PostgreSQL (tests/postgres_support.py, started as the tests start it, then restarted
durable: `fsync`, `synchronous_commit` and `full_page_writes` on, as a production server; the
tests' `fsync=off` would flatter it against SQLite's synced commits), both on this machine.
Every write goes through the real `Store` (bench/writerate_work.py `TimedStore`, which only
times `Store.write()`), the tick's through the real `Executor`; each store leads: a real
`LeaseKeeper` took the lease and renews it every `lease / 3`, so every write transaction
passes the lease fence first (on PostgreSQL the lease row `FOR SHARE`). Log lines are
dropped (structlog at CRITICAL): the figures are the store's and the executor's. Phases, the
two engines interleaved wherever a phase repeats:

1. Adoption: a fresh database (migrated to head), `size` nodes in 4 fleets of v5litepod-8
   (one worker each) in 4 zones, as bench/scale.py seeds them; the executor carries out the
   plan of a daemon finding them: RecordFleet, OpenSlot and Adopt actions, in transactions of
   `RECORD_BATCH`, runs of OpenSlot / Adopt written in bulk (`Tx.adopt_many`). Repeated
   (`adoptions` rounds); the last database goes on to the next phases.
2. Quiet ticks: what a steady tick writes when something moved: 1% of the nodes' cloud facts
   (health under maintenance: a RecordCloud each, one batch) and one zone's health row (the
   reconciler's write). A tick at steady state with nothing moved writes nothing.
3. The storm: every node preempted in one tick, planned as the planner plans a death (READY
   -> DEAD with the cloud facts, the slot's update counting the preemption and its event; then
   its DeleteNode), executed by the executor: the Transitions and the delete intents
   (`begin_delete`) in the plan's batches (`RECORD_BATCH` actions a transaction, a savepoint
   each; before issue 31 each Transition and each intent had a transaction of its own), no
   tick budget. Each delete goes, once its batch committed, to a background task as
   `CloudCalls` does (at most `MAX_DELETES` = 32 at once, a call taking `delete_latency_s`)
   that records the accepted delete (`record_outcome`),
   while the executor goes on: the daemon's real concurrency, all through one store, whose
   writers queue in-process (`Store._queue`) on both engines.
4. Patterns: the background write alone (`record_outcome` on a DELETING node),
   `pattern_writes` transactions (`pattern_rounds` rounds, the engines interleaved) by 1
   writer, by 16 writer tasks on one store (the daemon: they queue in process), and by 16
   stores with a connection each (the engine's own concurrency: what PostgreSQL could take
   without the queue; SQLite's busy handler).
5. A new leader's first snapshot, cold and warm (bench/writerate_warm.py), after the quiet
   ticks: a fresh store's read against a standby's that read at its last poll.
6. Contents: counts read back (nodes by phase, events by kind, preemptions, delete calls, the
   lease's epoch) against what the phases wrote.

Per phase: wall time, fenced transactions and their rate, latency (asked for -> committed,
this process's queue included) and the block plus commit alone, median and p99; CPU per
transaction of this process (for SQLite, SQLite itself too) and of the PostgreSQL server.
Ratios are PostgreSQL / SQLite of the same figure in this run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy.engine import URL

from bench import common
from bench import writerate_warm as warm
from bench import writerate_work as work
from bench.takeover import postgres_support
from tpucared.runtime.nodes.calls import MAX_DELETES
from tpucared.runtime.nodes.executor import RECORD_BATCH
from tpucared.store.migrate import upgrade_to_head

ENGINES = ("sqlite", "postgresql")
POLL_S = 10.0  # daemon.poll_interval's default (config/schema.py)
CONCURRENCY = 16
PATTERNS = ("1 writer", "16 writers, one store", "16 writers, 16 stores")
ROUNDS = 3  # a new leader's first snapshot: fresh stores per figure (bench/writerate_warm.py)
DURABLE = ("fsync=on", "synchronous_commit=on", "full_page_writes=on")


@dataclass(frozen=True)
class Settings:
    size: int
    adoptions: int  # adoption rounds per engine (a fresh database each)
    quiet_ticks: int
    pattern_writes: int  # transactions per pattern and round
    pattern_rounds: int  # the patterns are short: repeated, the engines interleaved
    delete_latency_s: float = 0.2

    @property
    def changed(self) -> int:
        return max(1, self.size // 100)


FULL = Settings(size=10_000, adoptions=3, quiet_ticks=10, pattern_writes=1_000, pattern_rounds=3)
QUICK = Settings(size=200, adoptions=2, quiet_ticks=4, pattern_writes=64, pattern_rounds=2)


# ---------------------------------------------------------------------------------------------
# The two engines


class Engine:
    """Where fresh databases come from: SQLite files in a directory, or databases of one
    PostgreSQL server (`pid`: its postmaster, whose process tree's CPU is measured)."""

    def __init__(self, name: str, scratch: Path, server: Any = None) -> None:
        self.name = name
        self._scratch = scratch
        self._server = server
        self._count = 0
        self.pid: int | None = None
        if server is not None:
            self.pid = int((server.data / "postmaster.pid").read_text().split()[0])

    def fresh(self) -> URL | str:
        self._count += 1
        if self._server is None:
            return str(self._scratch / f"state-{self._count}.db")
        url: URL = self._server.url(self._server.create_database())
        return url


def make_durable(server: Any) -> dict[str, str]:
    """Restart the tests' server (fsync=off, ...) as a production one would run, and return
    the settings it then reports."""
    options = " ".join(
        [
            f"-p {server.port}",
            "-c listen_addresses=127.0.0.1",
            f"-c unix_socket_directories={server.sockets}",
            *(f"-c {setting}" for setting in DURABLE),
            "-c max_connections=200",
            "-c shared_buffers=32MB",
        ]
    )
    argv = ["pg_ctl", "-D", str(server.data), "-l", str(server.log), "-o", options, "-w"]
    server._as_server([*argv, "restart"])
    names = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "shared_buffers")
    return {name: server.psql(f"SHOW {name}").strip() for name in names}


# ---------------------------------------------------------------------------------------------
# The phases


async def adopt(engine: Engine, size: int) -> tuple[work.Leader, dict[str, Any]]:
    url = engine.fresh()
    await upgrade_to_head(url)
    leader = await work.Leader.open(url)
    plan = work.adoption_plan(size)
    meter = work.Meter([leader.store], engine.pid)
    execution = await work.executor(leader.store).execute(plan)
    result = meter.stop(nodes=size, actions=len(plan), done=len(execution.done))
    result["nodes_per_s"] = round(size / result["wall_s"], 1)
    return leader, result


async def quiet_tick(
    engine: Engine, leader: work.Leader, nodes: list[Any], tick: int, s: Settings
) -> tuple[work.Meter, work.Meter]:
    """One quiet tick's writes: the RecordCloud batch (the executor), then the zone's row."""
    now = work.T0 + timedelta(seconds=POLL_S * (tick + 1))
    batch = work.Meter([leader.store], engine.pid)
    await work.executor(leader.store).execute(work.quiet_plan(nodes, tick, s.changed, now))
    batch.stop()
    zone = work.Meter([leader.store], engine.pid)
    await work.zone_health(leader.store, tick, now)
    zone.stop()
    return batch, zone


async def storm(engine: Engine, leader: work.Leader, s: Settings) -> dict[str, Any]:
    nodes = await work.live_nodes(leader.store)
    now = work.T0 + timedelta(hours=1)
    calls = work.DeleteOutcomes(leader.store, s.delete_latency_s)
    plan = work.storm_plan(nodes, now)
    whole = work.Meter([leader.store], engine.pid)
    tick = work.Meter([leader.store], engine.pid)
    execution = await work.executor(leader.store, calls).execute(plan)
    done = len(execution.done)
    ticked = tick.stop(actions=len(plan), done=done)
    await calls.wait()
    return {
        "preempted": len(nodes),
        "tick": ticked,  # the executor's tick: transitions and delete intents
        "all": whole.stop(delete_outcomes=len(calls.tasks)),  # ... and every delete's outcome
    }


async def pattern(
    engine: Engine,
    leader: work.Leader,
    url: Any,
    name: str,
    nodes: list[Any],
    s: Settings,
    round_: int,
) -> dict[str, Any]:
    extra: list[work.TimedStore] = []
    if name == PATTERNS[0]:
        stores = [leader.store]
    elif name == PATTERNS[1]:
        stores = [leader.store] * CONCURRENCY
    else:
        for _ in range(CONCURRENCY):
            store = work.TimedStore.at(url)
            store.fence = leader.fence()
            await store.leader_lease()  # connected before the clock starts
            extra.append(store)
        stores = extra
    tag = f"{round_}-{PATTERNS.index(name)}"
    try:
        meter = work.Meter(list(dict.fromkeys(stores)), engine.pid)
        await work.writers(stores, nodes, s.pattern_writes, tag)
        return meter.stop(writers=len(stores))
    finally:
        for store in extra:
            await store.close()


def _rounds(rounds: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Repeated phases: `key` summarized, and the round with its median (the figures)."""
    return {
        key: common.summarize([r[key] for r in rounds]),
        "median_round": sorted(rounds, key=lambda r: r[key])[len(rounds) // 2],
        "rounds": rounds,
    }


def _interleaved(engines: list[Engine], round_: int) -> list[Engine]:
    return engines if round_ % 2 == 0 else engines[::-1]


async def measure(engines: list[Engine], s: Settings, say: Callable[[str], None]) -> dict[str, Any]:
    leaders: dict[str, work.Leader] = {}
    urls: dict[str, Any] = {}
    adoption: dict[str, list[dict[str, Any]]] = {e.name: [] for e in engines}
    try:
        for r in range(s.adoptions):
            for e in _interleaved(engines, r):
                leader, result = await adopt(e, s.size)
                adoption[e.name].append(result)
                say(f"adoption {r + 1}/{s.adoptions} {e.name}: {result['wall_s']:.2f} s")
                if e.name in leaders:
                    await leaders[e.name].close()
                leaders[e.name], urls[e.name] = leader, leader.store.engine.url
        nodes = {e.name: await work.live_nodes(leaders[e.name].store) for e in engines}
        ticks: dict[str, list[tuple[work.Meter, work.Meter]]] = {e.name: [] for e in engines}
        for t in range(s.quiet_ticks):
            for e in _interleaved(engines, t):
                ticks[e.name].append(await quiet_tick(e, leaders[e.name], nodes[e.name], t, s))
        say("quiet ticks done")
        takeover = {
            e.name: await warm.first_snapshot(leaders[e.name], nodes[e.name], s.changed, ROUNDS)
            for e in engines
        }
        say(f"a new leader's first snapshot: {takeover}")
        storms: dict[str, Any] = {}
        for e in engines:
            storms[e.name] = await storm(e, leaders[e.name], s)
            say(f"storm {e.name}: {storms[e.name]['all']['wall_s']:.1f} s")
        rounds: dict[str, dict[str, list[dict[str, Any]]]] = {
            p: {e.name: [] for e in engines} for p in PATTERNS
        }
        for r in range(s.pattern_rounds):
            for i, p in enumerate(PATTERNS):
                for e in _interleaved(engines, r + i):
                    leader, url = leaders[e.name], urls[e.name]
                    done = await pattern(e, leader, url, p, nodes[e.name], s, r)
                    rounds[p][e.name].append(done)
                    say(f"{p} {e.name} round {r + 1}: {done['tx_per_s']} tx/s")
        writes = s.pattern_writes * len(PATTERNS) * s.pattern_rounds
        expected = work.expected_contents(s.size, s.quiet_ticks, s.changed, writes)
        expected["events"]["node.cloud"] += ROUNDS * s.changed  # the warm standby's ticks
        contents = {}
        for e in engines:
            found = await work.contents(leaders[e.name].store)
            contents[e.name] = {"found": found, "expected": expected, "ok": found == expected}
    finally:
        for leader in leaders.values():
            await leader.close()
    return {
        "adoption": {name: _rounds(samples, "wall_s") for name, samples in adoption.items()},
        "quiet_tick": {
            name: {
                "per_tick_wall": work.ms([b.wall + z.wall for b, z in pairs]),
                "transactions_per_tick": sum(len(b.samples + z.samples) for b, z in pairs)
                / len(pairs),
                "ticks": work.Meter.combine(
                    [m for pair in pairs for m in pair], ticks=len(pairs), changed=s.changed
                ),
                "cloud_batch": work.Meter.combine([b for b, _ in pairs]),
                "zone_health": work.Meter.combine([z for _, z in pairs]),
            }
            for name, pairs in ticks.items()
        },
        "storm": storms,
        "first_snapshot": takeover,
        "patterns": {
            p: {name: _rounds(samples, "tx_per_s") for name, samples in by_engine.items()}
            for p, by_engine in rounds.items()
        },
        "contents": contents,
    }


# ---------------------------------------------------------------------------------------------
# Ratios, the run, the table


FIGURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("adoption: wall s (median round)", ("adoption", "median_round", "wall_s")),
    ("adoption: nodes/s", ("adoption", "median_round", "nodes_per_s")),
    ("adoption: transactions", ("adoption", "median_round", "transactions")),
    ("adoption: latency median ms", ("adoption", "median_round", "latency", "median_ms")),
    ("adoption: latency p99 ms", ("adoption", "median_round", "latency", "p99_ms")),
    ("quiet tick: writes per tick, median ms", ("quiet_tick", "per_tick_wall", "median_ms")),
    ("quiet tick: writes per tick, p99 ms", ("quiet_tick", "per_tick_wall", "p99_ms")),
    ("quiet tick: tx/s", ("quiet_tick", "ticks", "tx_per_s")),
    ("quiet tick: cloud batch median ms", ("quiet_tick", "cloud_batch", "latency", "median_ms")),
    ("quiet tick: zone row median ms", ("quiet_tick", "zone_health", "latency", "median_ms")),
    ("new leader's first snapshot: cold ms", ("first_snapshot", "cold_ms")),
    ("new leader's first snapshot: warm standby ms", ("first_snapshot", "warm_ms")),
    ("storm: transactions", ("storm", "all", "transactions")),
    ("storm: executor's tick s", ("storm", "tick", "wall_s")),
    ("storm: all its writes s", ("storm", "all", "wall_s")),
    ("storm: tx/s", ("storm", "all", "tx_per_s")),
    ("storm: latency median ms", ("storm", "all", "latency", "median_ms")),
    ("storm: latency p99 ms", ("storm", "all", "latency", "p99_ms")),
    ("storm: block+commit median ms", ("storm", "all", "block_and_commit", "median_ms")),
    ("storm: client CPU ms/tx", ("storm", "all", "client_cpu_ms_per_tx")),
    ("storm: server CPU ms/tx", ("storm", "all", "server_cpu_ms_per_tx")),
    *(
        item
        for p in PATTERNS
        for item in (
            (f"{p}: tx/s", ("patterns", p, "median_round", "tx_per_s")),
            (f"{p}: latency median ms", ("patterns", p, "median_round", "latency", "median_ms")),
            (f"{p}: latency p99 ms", ("patterns", p, "median_round", "latency", "p99_ms")),
        )
    ),
)


def figure(measured: Mapping[str, Any], engine: str, path: tuple[str, ...]) -> float | None:
    """One engine's figure: `path` with the engine's name after its first key."""
    value: Any = measured[path[0]]
    if path[0] == "patterns":
        value = value[path[1]][engine]
        rest = path[2:]
    else:
        value, rest = value[engine], path[1:]
    for key in rest:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value if isinstance(value, int | float) else None


def ratios(measured: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    out = {}
    for label, path in FIGURES:
        sqlite, postgres = (figure(measured, e, path) for e in ENGINES)
        out[label] = {
            "sqlite": sqlite,
            "postgresql": postgres,
            "pg_over_sqlite": common.ratio(postgres, sqlite),
        }
    return out


def run(
    quick: bool,
    *,
    size: int | None = None,
    durable: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    s = QUICK if quick else FULL
    if size is not None:
        s = dataclasses.replace(s, size=size)
    say = progress or (lambda line: print(line, flush=True))
    server = postgres_support().PostgresServer()
    logging_config = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    try:
        with tempfile.TemporaryDirectory(prefix="tpucared-writerate-") as tmp:
            server.start()
            settings = make_durable(server) if durable else {"fsync": "off (the tests')"}
            engines = [Engine("sqlite", Path(tmp)), Engine("postgresql", Path(tmp), server)]
            measured = asyncio.run(measure(engines, s, say))
    finally:
        structlog.configure(**logging_config)
        with contextlib.suppress(Exception):
            server.stop()
    return {
        "parameters": {
            "nodes": s.size,
            "fleets": [list(f) for f in work.fleets(s.size)],
            "accelerator_type": work.ACCELERATOR,
            "adoption_rounds": s.adoptions,
            "record_batch": RECORD_BATCH,
            "quiet_ticks": s.quiet_ticks,
            "quiet_changed_per_tick": s.changed,
            "storm_delete_call_latency_s": s.delete_latency_s,
            "max_deletes": MAX_DELETES,
            "pattern_writes": s.pattern_writes,
            "pattern_rounds": s.pattern_rounds,
            "concurrency": CONCURRENCY,
            "lease_s": work.LEASE_S,
            "poll_interval_default_s": POLL_S,
            "first_snapshot_rounds": ROUNDS,
        },
        "engines": {
            "sqlite": {"journal_mode": "wal", "synchronous": "FULL (make_engine's default)"},
            "postgresql": settings,
        },
        **measured,
        "ratios": ratios(measured),
    }


def render(result: Mapping[str, Any]) -> str:
    rows = [
        [label, _num(r["sqlite"]), _num(r["postgresql"]), common.format_ratio(r["pg_over_sqlite"])]
        for label, r in result["ratios"].items()
    ]
    head = ["figure", "SQLite", "PostgreSQL", "PG / SQLite"]
    ok = {e: c["ok"] for e, c in result["contents"].items()}
    n = result["parameters"]["nodes"]
    return f"{n} nodes; contents as written: {ok}\n" + common.table(head, rows)


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.writerate", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size", type=int, help="nodes (default 10,000; quick 200)")
    parser.add_argument(
        "--as-tests", action="store_true", help="PostgreSQL as the tests run it (fsync=off)"
    )
    parser.add_argument("--output-dir", type=Path, default=common.RESULTS_DIR)
    args = parser.parse_args(argv)
    from bench import run as harness

    def measured(quick: bool) -> dict[str, Any]:
        return run(quick, size=args.size, durable=not args.as_tests)

    path, envelope = harness.run_one(
        "writerate", measured, quick=args.quick, output_dir=args.output_dir
    )
    print(render(envelope["result"]))
    print(f"written to {path}")
    print(json.dumps(envelope["result"]["parameters"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
