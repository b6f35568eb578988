"""`tpucared logs`, `tpucared exec` and `tpucared cp`: reaching a fleet's workers by hand.

    tpucared logs FLEET/SLOT [--worker N] [--follow]
    tpucared exec FLEET[/SLOT] [--worker all|N|N-M] -- CMD
    tpucared cp SRC FLEET[/SLOT]:DEST [--worker all|N|N-M]

Each takes the config (for [ssh]: user, port, key, addresses), a store snapshot read by the
caller (read-only: these work while the daemon runs or is down), and the command's arguments;
it returns the exit status. Only READY nodes are reached, with the host keys the daemon pinned
for their incarnation (a worker the daemon never reached is trusted on first use, and not
pinned: these commands write nothing). A multislice slot is reached on every slice, its
workers numbered slice by slice as the daemon's probes number them. Bad arguments raise
`CommandError` (exit status 2).

The workers are reached through the `ByHand` port (tpucared/ports/launcher.py); its SSH
implementation (tpucared/launch/by_hand.py) is chosen in launchers.py. What is selected, how
the output is prefixed and which status the command exits with are this module's.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO, TypeVar

from tpucared.config import Config
from tpucared.core.model.records import IncarnationRecord, NodePhase, WorkerRecord
from tpucared.core.workload.gang import slot_node
from tpucared.ports.launcher import ByHand, Place, Run, WorkerFile
from tpucared.runtime.workload.launchers import by_hand_for
from tpucared.store import Snapshot

T = TypeVar("T")

_WHERE = re.compile(r"(?P<fleet>[a-z][a-z0-9-]*)(?:/(?P<slot>0|[1-9][0-9]*))?")
_WORKERS = re.compile(r"all|(?P<first>[0-9]+)(?:-(?P<last>[0-9]+))?")


class CommandError(ValueError):
    """Bad usage: an unknown fleet or slot, a malformed selection. Exit status 2."""


@dataclass(frozen=True)
class Where:
    fleet: str
    slot: int | None  # None: every slot of the fleet

    def __str__(self) -> str:
        return self.fleet if self.slot is None else f"{self.fleet}/{self.slot}"


@dataclass(frozen=True)
class Worker:
    """One worker of a slot: `number`, counted slice by slice; `index` in its slice's place."""

    number: int
    place: Place
    index: int

    @property
    def at(self) -> tuple[Place, int]:
        return self.place, self.index


@dataclass(frozen=True)
class Workers:
    first: int | None = None  # None: all
    last: int | None = None

    def pick(self, workers: Sequence[Worker]) -> list[Worker]:
        if self.first is None:
            return list(workers)
        last = self.first if self.last is None else self.last
        if last >= len(workers):
            raise CommandError(f"worker {last} does not exist: the node has {len(workers)}")
        return [w for w in workers if self.first <= w.number <= last]


def parse_where(text: str) -> Where:
    m = _WHERE.fullmatch(text)
    if m is None:
        raise CommandError(f"{text!r}: expected FLEET or FLEET/SLOT")
    return Where(m["fleet"], int(m["slot"]) if m["slot"] is not None else None)


def parse_workers(text: str) -> Workers:
    m = _WORKERS.fullmatch(text)
    if m is None:
        raise CommandError(f"--worker {text!r}: expected all, N or N-M")
    if text == "all":
        return Workers()
    first = int(m["first"])
    last = int(m["last"]) if m["last"] is not None else None
    if last is not None and last < first:
        raise CommandError(f"--worker {text!r}: the range is empty")
    return Workers(first, last)


def parse_remote(text: str) -> tuple[Where, str]:
    """`FLEET[/SLOT]:PATH` (the destination of `cp`)."""
    where, sep, path = text.partition(":")
    if not sep or not path:
        raise CommandError(f"{text!r}: expected FLEET[/SLOT]:PATH")
    return parse_where(where), path


# ---------------------------------------------------------------------------------------------
# The commands


async def logs(
    config: Config,
    snapshot: Snapshot,
    where: str,
    *,
    worker: int = 0,
    follow: bool = False,
    lines: int = 100,
    attempt: int | None = None,
    out: BinaryIO | None = None,
    err: TextIO | None = None,
) -> int:
    """The end of one worker's log of the slot's newest attempt (or `attempt`) on its
    current node; `follow` streams it until interrupted."""
    out = out or sys.stdout.buffer
    err = err or sys.stderr
    w = parse_where(where)
    if w.slot is None:
        raise CommandError(f"{where!r}: logs needs FLEET/SLOT")
    hands = by_hand_for(config)
    try:
        (target,) = Workers(worker).pick(_slice(hands, snapshot, w.fleet, w.slot))
    except _NotReady as exc:
        err.write(f"{exc}\n")
        return 1
    members = _members(snapshot, w.fleet, w.slot)
    inc = slot_node(members)  # a multislice slot's attempts are on its newest slice's id
    assert inc is not None  # _slice found it READY
    if attempt is None:
        last = snapshot.last_attempts.get((w.fleet, w.slot))
        if last is None or last.incarnation_id != inc.id:
            on = inc.node_name if len(members) == 1 else f"the {len(members)} slices of {w}"
            err.write(f"{w}: no attempt has run on {on} yet\n")
            return 1
        attempt = last.number
    run = Run(snapshot.slots[(w.fleet, w.slot)].run_id, attempt)
    reply = await _opened(
        hands.log(target.place, target.index, run, lines=lines, follow=follow, out=out, err=err)
    )
    if not reply.completed:
        err.write(f"worker {target.number}: {reply.why}\n")
    return reply.status


async def exec_command(
    config: Config,
    snapshot: Snapshot,
    where: str,
    command: str,
    *,
    workers: str = "all",
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run `command` on the selected workers of every selected slot; each output line is
    prefixed by `FLEET/SLOT/WORKER: `. The status is the highest exit status (255 when a
    worker could not be reached)."""
    out = out or sys.stdout
    err = err or sys.stderr
    hands = by_hand_for(config)
    targets = _select(hands, snapshot, parse_where(where), parse_workers(workers), err)
    if not targets:
        return 1
    replies = await _opened(hands.run([t.at for _, t in targets], command))
    status = 0
    for (prefix, _), r in zip(targets, replies, strict=True):
        for line in r.stdout.splitlines():
            out.write(f"{prefix}: {line}\n")
        for line in r.stderr.splitlines():
            err.write(f"{prefix}: {line}\n")
        if not r.completed:
            err.write(f"{prefix}: {r.why}\n")
        status = max(status, r.status)
    return status


async def copy(
    config: Config,
    snapshot: Snapshot,
    source: str,
    destination: str,
    *,
    workers: str = "all",
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Copy the local file `source` to `FLEET[/SLOT]:PATH` on the selected workers (mode
    kept; a relative PATH is relative to the login directory)."""
    out = out or sys.stdout
    err = err or sys.stderr
    where, path = parse_remote(destination)
    try:
        file = await asyncio.to_thread(_local_file, source, path)
    except FileNotFoundError as exc:
        raise CommandError(f"{source}: no such file") from exc
    except IsADirectoryError as exc:
        raise CommandError(f"{source}: is a directory (cp copies one file)") from exc
    except OSError as exc:
        raise CommandError(f"{source}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # _local_file refuses what is not a regular file
        raise CommandError(_not_a_file(source)) from exc
    hands = by_hand_for(config)
    targets = _select(hands, snapshot, where, parse_workers(workers), err)
    if not targets:
        return 1
    replies = await _opened(hands.copy([t.at for _, t in targets], file))
    failed = 0
    for (prefix, _), r in zip(targets, replies, strict=True):
        if r.ok:
            out.write(f"{prefix}: {path} ({len(file.content)} bytes)\n")
        else:
            failed += 1
            err.write(f"{prefix}: {r.why}\n")
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# Helpers


async def _opened(call: Awaitable[T]) -> T:
    """`call`'s answer; connections that could not be opened at all (no key) are bad usage."""
    try:
        return await call
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


def _local_file(source: str, remote: str) -> WorkerFile:
    """The local file to copy, its permission bits kept; ValueError if not a regular file."""
    local = Path(source)
    if not local.is_file():
        raise ValueError(f"{local} is not a regular file (directories are not supported)")
    return WorkerFile(remote, local.read_bytes(), local.stat().st_mode & 0o777)


def _not_a_file(source: str) -> str:
    """Why `source` cannot be copied, said once: missing, a directory, or something else."""
    if not os.path.lexists(source):
        return f"{source}: no such file"
    if os.path.isdir(source):
        return f"{source}: is a directory (cp copies one file)"
    if not os.path.exists(source):
        return f"{source}: a broken symbolic link"
    return f"{source}: not a regular file"


def _slice(hands: ByHand, snapshot: Snapshot, fleet: str, slot: int) -> list[Worker]:
    """The workers of a slot's READY node, pinned as the daemon pinned them; of every slice
    of a multislice slot, its workers numbered slice by slice as the daemon numbers them."""
    if (fleet, slot) not in snapshot.slots:
        known = fleet in {f for f, _ in snapshot.slots}
        raise CommandError(f"{fleet}/{slot}: no such slot" if known else f"unknown fleet {fleet}")
    members = _members(snapshot, fleet, slot)
    if not members:
        raise _NotReady(f"{fleet}/{slot}: the node is not READY (no node)")
    found: list[Worker] = []
    for inc in members:
        workers = snapshot.workers_of(inc.id)
        if inc.phase is not NodePhase.READY or not workers:
            which = f" (slice {inc.slice}, {inc.node_name})" if len(members) > 1 else ""
            raise _NotReady(f"{fleet}/{slot}: the node is not READY ({inc.phase.value}){which}")
        place = hands.locate(inc, workers)
        if isinstance(place, str):
            raise _NotReady(f"{fleet}/{slot}: {place}")
        offset = len(found)
        found += [Worker(offset + w.index, place, w.index) for w in sorted(workers, key=_index)]
    return found


def _index(worker: WorkerRecord) -> int:
    return worker.index


def _members(snapshot: Snapshot, fleet: str, slot: int) -> list[IncarnationRecord]:
    """The slot's live incarnations, by slice (one, unless it is a multislice slot)."""
    found = [i for (f, s, _), i in snapshot.nodes.items() if (f, s) == (fleet, slot)]
    return sorted(found, key=lambda i: i.slice)


class _NotReady(Exception):
    pass


def _select(
    hands: ByHand, snapshot: Snapshot, where: Where, workers: Workers, err: TextIO
) -> list[tuple[str, Worker]]:
    """(prefix, target) for every selected worker; slots without a READY node are named on
    `err` and skipped (a named slot without one is the only slot, so nothing is selected)."""
    if where.slot is not None:
        slots = [where.slot]
    else:
        slots = sorted(i for f, i in snapshot.slots if f == where.fleet)
        if not slots:
            raise CommandError(f"unknown fleet {where.fleet}")
    selected: list[tuple[str, Worker]] = []
    for slot in slots:
        try:
            picked = workers.pick(_slice(hands, snapshot, where.fleet, slot))
        except _NotReady as exc:
            err.write(f"{exc}\n")
            continue
        selected += [(f"{where.fleet}/{slot}/{w.number}", w) for w in picked]
    return selected
