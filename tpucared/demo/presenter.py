"""What the demo shows while it runs, and the summary it ends with.

Everything shown comes from where a person would look: the daemon's database (read-only,
like `tpucared status` and `tpucared events`, rendered by the same functions) and the toy
workload's checkpoints (progress.py). Two forms:

- `LiveView`, on a TTY: one screen refreshed in place every second: the status table
  (`tpucared.inspect.status.status_lines`), each slot's training progress, what the scenario
  injected, and the latest events.
- `PlainView`, otherwise (a pipe, a log, a test): lines that only append: what the scenario
  injects, every event (`tpucared.inspect.events.event_line`), and a line whenever a slot's
  training starts or resumes.

Both end with `Summary.lines()`: preemptions detected, nodes replaced, and per slot the highest
step reached, the attempts it took and the step the last attempt resumed from; then
`ledger_lines`: each slot's ledger (where its time went), rendered by `tpucared goodput`'s own
functions (inspect/ledger.py).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from sqlalchemy.exc import SQLAlchemyError

from tpucared.core.ledger.cost import Prices
from tpucared.core.model.records import EventRecord
from tpucared.demo.progress import Progress, read_progress
from tpucared.inspect.events import event_line
from tpucared.inspect.ledger import goodput_lines, ledgers, shares, since_text
from tpucared.inspect.status import status_lines
from tpucared.store import FleetStatus, Store

SlotKey = tuple[str, int]
EVENTS_PAGE = 500


@dataclass(frozen=True)
class SlotSummary:
    fleet: str
    slot: int
    attempts: int
    preemptions: int
    progress: Progress | None

    def line(self) -> str:
        where = f"{self.fleet}/{self.slot}"
        plural = "s" if self.attempts != 1 else ""
        if self.progress is None:
            return f"{where}: no step checkpointed ({self.attempts} attempt{plural})"
        p = self.progress
        resumed = f" (resumed from {p.resumed_from})" if p.resumed_from else ""
        return f"{where}: step {p.step} after {self.attempts} attempt{plural}{resumed}"


@dataclass(frozen=True)
class Summary:
    preemptions: int
    replaced: int
    slots: tuple[SlotSummary, ...]

    def lines(self) -> list[str]:
        return [
            f"preemptions detected: {self.preemptions}",
            f"nodes replaced: {self.replaced}",
            *(s.line() for s in self.slots),
        ]


async def ledger_lines(store: Store, prices: Prices, now: datetime) -> list[str]:
    """Each slot's ledger to `now`, as `tpucared goodput` prints it (categories with seconds,
    share and dollars, top causes of loss, the headline), then each slot's goodput."""
    async with store.read() as r:
        records = await r.ledger()
    fleets = await asyncio.to_thread(ledgers, records, prices, now, None)
    lines = goodput_lines(fleets, since_text(None, fleets))
    for (fleet, slot), share in shares(fleets).items():
        lines.append(f"goodput {fleet}/{slot}: {share:.1%}")
    return lines


async def summarize(store: Store, checkpoints: Path) -> Summary:
    fleets = await store.status()
    async with store.read() as r:
        incarnations = await r.incarnations()
    served: dict[SlotKey, int] = {}  # incarnations that became READY, per slot
    for inc in incarnations:
        if inc.ready_at is not None:
            served[(inc.fleet, inc.slot)] = served.get((inc.fleet, inc.slot), 0) + 1
    rows = [s for f in fleets for s in f.slots]
    progress = await asyncio.to_thread(
        lambda: [read_progress(checkpoints, s.slot.run_id) for s in rows]
    )
    slots = tuple(
        SlotSummary(
            fleet=s.slot.fleet,
            slot=s.slot.index,
            attempts=s.slot.attempts,
            preemptions=s.slot.preemptions,
            progress=p,
        )
        for s, p in zip(rows, progress, strict=True)
    )
    return Summary(
        preemptions=sum(s.preemptions for s in slots),
        replaced=sum(max(0, n - 1) for n in served.values()),
        slots=slots,
    )


@dataclass
class Reading:
    """One look at the database and the checkpoints."""

    fleets: list[FleetStatus]
    events: list[EventRecord]  # new since the previous reading
    progress: dict[SlotKey, Progress]
    at: datetime


@dataclass
class Reader:
    """Follows the database (and the checkpoints, if any); opens the database read-only, as
    `tpucared status` does, once the daemon has created it."""

    db: str  # the `daemon.db` setting: a path or a URL
    checkpoints: Path | None = None
    last_event: int = 0  # events after this id are new
    store: Store | None = None

    async def read(self) -> Reading | None:
        """None while the database is not there yet (the daemon is still migrating it)."""
        if self.store is None:
            if not await asyncio.to_thread(_exists, self.db):
                return None
            self.store = Store.open(self.db, read_only=True)
        try:
            fleets = await self.store.status()
            events: list[EventRecord] = []
            while True:
                page = await self.store.events(self.last_event, EVENTS_PAGE)
                events += page
                if page:
                    self.last_event = page[-1].id
                if len(page) < EVENTS_PAGE:
                    break
        except SQLAlchemyError:
            return None  # not migrated yet; next time
        progress = await asyncio.to_thread(self._progress, fleets)
        return Reading(fleets, events, progress, datetime.now(UTC))

    def _progress(self, fleets: Sequence[FleetStatus]) -> dict[SlotKey, Progress]:
        found: dict[SlotKey, Progress] = {}
        if self.checkpoints is None:
            return found
        for f in fleets:
            for s in f.slots:
                p = read_progress(self.checkpoints, s.slot.run_id)
                if p is not None:
                    found[(f.fleet.name, s.slot.index)] = p
        return found

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()
            self.store = None


def _exists(db: str) -> bool:
    return "://" in db or Path(db).exists()


def progress_line(key: SlotKey, p: Progress) -> str:
    where = f"{key[0]}/{key[1]}"
    how = f"resumed from step {p.resumed_from}" if p.resumed_from else "from scratch"
    if p.on_notice:
        return f"{where}: checkpoint saved at step {p.step} on notice (attempt {p.attempt})"
    return f"{where}: step {p.step} (attempt {p.attempt}, {how}, on {p.node or '?'})"


def elapsed_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


@dataclass
class PlainView:
    """Append-only lines: injections, events, and each slot's training (re)starts."""

    out: TextIO
    seen_attempt: dict[SlotKey, int] = field(default_factory=dict)
    seen_notice: dict[SlotKey, int] = field(default_factory=dict)

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def injected(self, elapsed: float, text: str) -> None:
        self.say(f"[demo +{elapsed_text(elapsed)}] inject: {text}")

    def show(self, reading: Reading, elapsed: float) -> None:
        for e in reading.events:
            self.say(event_line(e))
        for key, p in sorted(reading.progress.items()):
            if p.on_notice and self.seen_notice.get(key) != p.attempt:
                self.seen_notice[key] = p.attempt
                self.say(f"[demo +{elapsed_text(elapsed)}] training {progress_line(key, p)}")
            if self.seen_attempt.get(key) != p.attempt:
                self.seen_attempt[key] = p.attempt
                self.say(f"[demo +{elapsed_text(elapsed)}] training {progress_line(key, p)}")

    def close(self) -> None:
        pass


@dataclass
class LiveView:
    """One screen, redrawn in place."""

    out: TextIO
    header: Sequence[str]
    injections: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    note: str = ""
    drawn: bool = False

    def say(self, text: str) -> None:
        self.note = text

    def injected(self, elapsed: float, text: str) -> None:
        self.injections.append(f"+{elapsed_text(elapsed)}  {text}")

    def show(self, reading: Reading, elapsed: float) -> None:
        self.events += [event_line(e) for e in reading.events]
        del self.events[:-50]
        size = shutil.get_terminal_size((120, 40))
        lines = [*self.header, ""]
        lines += status_lines(reading.fleets, reading.at) if reading.fleets else ["(starting)"]
        lines += ["", "training (checkpointed steps per slot):"]
        lines += [f"  {progress_line(k, p)}" for k, p in sorted(reading.progress.items())] or [
            "  (no step yet)"
        ]
        lines += ["", "injected:"]
        lines += [f"  {i}" for i in self.injections[-5:]] or ["  (nothing yet)"]
        note = ["", self.note] if self.note else []
        room = max(1, size.lines - len(lines) - len(note) - 3)
        lines += ["", "events:", *(f"  {e}" for e in self.events[-room:]), *note]
        # Never more lines than the screen has: a scroll would shift every later frame.
        lines = lines[: max(1, size.lines - 1)]
        text = "".join(line[: size.columns - 1] + "\x1b[K\n" for line in lines)
        self.out.write("\x1b[H" + text + "\x1b[J")  # home, draw, clear below
        self.out.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.out.write("\n")
            self.out.flush()


View = PlainView | LiveView
