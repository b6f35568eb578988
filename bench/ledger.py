"""`tpucared goodput` over 30 days of a 10,000-slot fleet (issue 42 item 5): how long the ledger
takes to answer, as a user runs it.

Method. One slot's 30-day history is written through the store's own write API (the
template: every `CYCLE` a capacity failure, a create, the node READY 5 min later, an attempt
that crashes after 10 h and is relaunched on the same node, and a preemption at 30 h, the
node deleted), then copied by SQL to every slot (ids, slot numbers and node names shifted;
1,000 slots per fleet): every slot has the same history, so the store holds what 30 days of
a fleet that size write into `nodes`, `workload_attempts` and `create_attempts`. Then the CLI
runs as a subprocess (`tpucared goodput -c CONFIG --json`): the whole history, `--since 7d`,
one fleet, one slot; `REPEATS` runs each, median and max. The output is checked: every slot's
categories add up to its wall time.

Then the daemon's maintenance pass keeps every slot's closed days (runtime/ledger_days.py, as
`tpucared run` does at its start and every 10 minutes; timed: `keep_s`), and the same cases
run again (`kept`): `goodput` now sums the kept days and tiles only each slot's open tail. The
figures (whole history and the last 7 days) are checked to be every slot's full recompute.

The tools we compare with keep no ledger to time (tpucare, SkyPilot and Levanter's babysit
script record nothing per slot; Google's ml-goodput-measurement computes from Cloud Logging
entries the training code writes, not reachable here): the figure stands alone, against the
issue's "within seconds".
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import daemon_config
from tpucared.core.ledger.cost import Prices
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome, CreateAttemptRecord, NodePhase
from tpucared.inspect.ledger import ledgers
from tpucared.runtime.clock import SystemClock
from tpucared.runtime.ledger_days import LedgerDays
from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head

P = NodePhase
DAYS = 30
CYCLE = timedelta(hours=36)
PER_FLEET = 1000
REPEATS = 3
TYPE = "v6e-8"
SPEC = {"accelerator_type": TYPE, "capacity": "spot", "workload": {"run": "python3 train.py"}}


async def template(path: Path, start: datetime, now: datetime) -> int:
    """Slot 0 of fleet `f0`: cycles from `start` to `now` (module docstring); how many."""
    await upgrade_to_head(path)
    cycles = 0
    async with Store.open(path) as store, store.write() as tx:
        await tx.record_fleet("f0", "hash", json.dumps({"name": "f0", **SPEC}), start)
        await tx.ensure_slots("f0", 1, start)
        at = start
        while at + CYCLE <= now:
            cycles += 1
            failed = await tx.request_node("f0", 0, "f0-0", "z-a", TYPE, at)
            await tx.record_create_attempt(
                CreateAttemptRecord("f0", 0, "z-a", TYPE, at, "capacity", 1.0, "stockout",
                                    failed.id)
            )  # fmt: skip
            await tx.transition(failed.id, P.REQUESTED, P.FAILED, at)
            made = at + timedelta(minutes=10)
            node = await tx.request_node("f0", 0, "f0-0", "z-a", TYPE, made)
            await tx.record_create_attempt(
                CreateAttemptRecord("f0", 0, "z-a", TYPE, made, "ok", 1.0, None, node.id)
            )
            await tx.transition(node.id, P.REQUESTED, P.CREATING, made)
            ready = made + timedelta(minutes=5)
            await tx.transition(node.id, P.CREATING, P.READY, ready)
            first = await tx.start_attempt(node.id, ready + timedelta(minutes=1))
            crash = ready + timedelta(hours=10)
            await tx.finish_attempt(first.id, AttemptOutcome.FAILED, crash)
            second = await tx.start_attempt(node.id, crash + timedelta(minutes=1))
            lost = ready + timedelta(hours=30)
            await tx.transition(node.id, P.READY, P.DEAD, lost, cause=LossCause.PREEMPTED)
            await tx.finish_attempt(second.id, AttemptOutcome.PREEMPTED, lost)
            await tx.begin_delete(node.id, P.DEAD, lost)
            await tx.transition(node.id, P.DELETING, P.DELETED, lost + timedelta(minutes=2))
            at += CYCLE
    return cycles


def copy_slots(path: Path, slots: int) -> None:
    """The template slot copied to slots 1..slots-1 (`PER_FLEET` a fleet), in SQL."""
    con = sqlite3.connect(path)
    try:
        columns = {t: [r[1] for r in con.execute(f"PRAGMA table_info({t})")] for t in
                   ("nodes", "workload_attempts", "create_attempts", "slots")}  # fmt: skip
        (span,) = con.execute("SELECT max(id) FROM nodes").fetchone()
        (aspan,) = con.execute("SELECT max(id) FROM workload_attempts").fetchone()
        (cspan,) = con.execute("SELECT max(id) FROM create_attempts").fetchone()
        fleets = (slots + PER_FLEET - 1) // PER_FLEET
        for f in range(1, fleets):
            con.execute(
                "INSERT INTO fleets (name, spec_hash, spec_json, applied_at, down) "
                "SELECT ?, spec_hash, replace(spec_json, '\"f0\"', ?), applied_at, down "
                "FROM fleets WHERE name = 'f0'",
                (f"f{f}", f'"f{f}"'),
            )
        con.execute(
            "CREATE TEMP TABLE k AS WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 "
            "FROM k WHERE n < ?) SELECT n, 'f' || (n / ?) AS fleet, n % ? AS slot FROM k",
            (slots - 1, PER_FLEET, PER_FLEET),
        )
        shifted = {
            "id": "t.id + k.n * {span}",
            "fleet": "k.fleet",
            "slot": "k.slot",
            "node_name": "k.fleet || '-' || k.slot",
            "node_id": "t.node_id + k.n * {span}",
            "incarnation_id": "t.incarnation_id + k.n * {span}",
        }
        spans = {"nodes": span, "workload_attempts": aspan, "create_attempts": cspan,
                 "slots": 0}  # fmt: skip
        for table, names in columns.items():
            values = []
            for name in names:
                expr = shifted.get(name, f"t.{name}")
                if name == "id":
                    expr = f"t.id + k.n * {spans[table]}"
                values.append(expr.format(span=span))
            if table == "slots":
                values = [v if n != "run_id" else "k.fleet || '-' || k.slot || '-r'" for n, v in
                          zip(names, values, strict=True)]  # fmt: skip
                values = [v for n, v in zip(names, values, strict=True) if n != "id"]
                names = [n for n in names if n != "id"]
            con.execute(
                f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(values)} "
                f"FROM {table} AS t, k WHERE t.fleet = 'f0' AND t.slot = 0"
            )
        con.commit()
    finally:
        con.close()


def counts(path: Path) -> dict[str, int]:
    con = sqlite3.connect(path)
    try:
        tables = ("slots", "nodes", "workload_attempts", "create_attempts")
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        con.close()


def goodput(config: Path, *args: str) -> tuple[float, dict[str, Any]]:
    """One `tpucared goodput --json` run: (wall seconds, its document)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tpucared", "goodput", "-c", str(config), "--json", *args],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"tpucared goodput {args} exited {done.returncode}: {done.stderr}")
    return seconds, json.loads(done.stdout)


def check(document: dict[str, Any], slots: int, start: datetime) -> None:
    """Every slot's ledger runs from its first create (`start`) to the document's `now`, and
    its categories add up to that wall time (to the second)."""
    wall = (datetime.fromisoformat(document["now"]) - start).total_seconds()
    seen = 0
    for fleet in document["fleets"]:
        for slot in fleet["slots"]:
            seen += 1
            total = sum(c["seconds"] for c in slot["categories"].values())
            where = f"{fleet['fleet']}/{slot['slot']}"
            if abs(slot["wall_s"] - wall) > 1.0 or abs(total - wall) > 1.0:
                raise AssertionError(f"{where}: {total} s by category, {slot['wall_s']}, {wall}")
    if seen != slots:
        raise AssertionError(f"{seen} slots in the ledger, {slots} written")


async def keep_days(db: Path) -> int:
    """One pass of the daemon's kept ledger days (what `tpucared run` does at its start)."""
    async with Store.open(db) as store:
        return await LedgerDays(store, SystemClock(), pause=0).keep()


async def same_figures(db: Path) -> bool:
    """Every slot's figures from the kept days and the tail, over the whole history and over
    the last 7 days (head, kept days, tail), equal a full recompute's (every row tiled, then
    clipped), at the same instant (in-process: the CLI's `now` is its own)."""
    now = datetime.now(UTC)
    since = now - timedelta(days=7)
    async with Store.open(db, read_only=True) as store, store.read() as r:
        every = await r.ledger(kept=False)
        full = [ledgers(every, Prices(), now, s) for s in (None, since)]
        kept = [ledgers(await r.ledger(since=s), Prices(), now, s) for s in (None, since)]
    for a, b in zip(full, kept, strict=True):
        summaries = [[row.summary for f in fleets for row in f.slots] for fleets in (a, b)]
        if not summaries[0] or summaries[0] != summaries[1]:
            return False
    return True


def cases(config: Path, slots: int, repeats: int, start: datetime) -> list[dict[str, Any]]:
    """Each case's runs; the whole history's output checked."""
    named = {
        "whole history": (),
        "--since 7d": ("--since", "7d"),
        "one fleet": ("f1" if slots > PER_FLEET else "f0",),
        "one slot": ("f0/0",),
    }
    rows = []
    for name, args in named.items():
        times = []
        for _ in range(repeats):
            seconds, document = goodput(config, *args)
            times.append(seconds)
            if name == "whole history":
                check(document, slots, start)
            del document
        rows.append({"case": name, "args": list(args), "runs": [round(t, 2) for t in times],
                     "median_s": round(statistics.median(times), 2),
                     "max_s": round(max(times), 2)})  # fmt: skip
    return rows


def run(quick: bool, *, slots: int | None = None, days: int | None = None) -> dict[str, Any]:
    slots = slots or (200 if quick else 10_000)
    days = days or (3 if quick else DAYS)
    repeats = 1 if quick else REPEATS
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(days=days)
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as tmp:
        db = Path(tmp) / "state.db"
        made = time.monotonic()
        cycles = asyncio.run(template(db, start, now))
        copy_slots(db, slots)
        fill_s = time.monotonic() - made
        config = Path(tmp) / "fleet.toml"
        config.write_text(
            daemon_config.render(daemon_config.minimal(daemon={"db": str(db)}))
            + "\n[prices.v6e]\nspot = 0.54\n",
            encoding="utf-8",
        )
        rows = cases(config, slots, repeats, start)
        kept_started = time.monotonic()
        moved = asyncio.run(keep_days(db))
        keep_s = time.monotonic() - kept_started
        kept_rows = cases(config, slots, repeats, start)
        same = asyncio.run(same_figures(db))
        if not same:
            raise AssertionError("the kept days and the tail differ from a full recompute")
        return {
            "slots": slots, "days": days, "cycles_per_slot": cycles, "rows": counts(db),
            "db_mb": round(db.stat().st_size / 2**20, 1), "fill_s": round(fill_s, 1),
            "results": rows, "keep_s": round(keep_s, 1), "kept_slots": moved,
            "kept": kept_rows, "same_figures": same,
        }  # fmt: skip


def render(result: dict[str, Any]) -> str:
    head = (
        f"tpucared goodput over {result['days']} days of {result['slots']} slots "
        f"({result['rows']}, {result['db_mb']} MB)"
    )
    lines = [head, "| case | runs (s) | median | max |", "|---|---|---:|---:|"]
    for r in result["results"]:
        runs = ", ".join(f"{t:.2f}" for t in r["runs"])
        lines.append(f"| {r['case']} | {runs} | {r['median_s']:.2f} s | {r['max_s']:.2f} s |")
    lines += [
        "",
        f"the daemon's pass keeping closed days: {result['keep_s']} s for "
        f"{result['kept_slots']} slots; then (same figures: {result['same_figures']})",
        "| case | runs (s) | median | max |",
        "|---|---|---:|---:|",
    ]
    for r in result["kept"]:
        runs = ", ".join(f"{t:.2f}" for t in r["runs"])
        lines.append(f"| {r['case']} | {runs} | {r['median_s']:.2f} s | {r['max_s']:.2f} s |")
    return "\n".join(lines)


if __name__ == "__main__":
    out = run("--quick" in sys.argv)
    print(render(out))
