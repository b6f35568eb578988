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
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, TextIO

import asyncssh

from tpucared.config import Config
from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.workload.gang import slot_node
from tpucared.launch import layout, log_tail_command
from tpucared.ssh import (
    ConnectionPool,
    FileUpload,
    KeyFileError,
    Target,
    WorkerResult,
    ensure_client_key,
    run_on_all,
    targets_for_node,
    upload,
)
from tpucared.ssh.errors import CLASSIFIED_ERRORS, classify, describe
from tpucared.store import Snapshot

_WHERE = re.compile(r"(?P<fleet>[a-z][a-z0-9-]*)(?:/(?P<slot>0|[1-9][0-9]*))?")
_WORKERS = re.compile(r"all|(?P<first>[0-9]+)(?:-(?P<last>[0-9]+))?")
SSH_FAILED = 255  # what ssh exits with when it cannot run the command


class CommandError(ValueError):
    """Bad usage: an unknown fleet or slot, a malformed selection. Exit status 2."""


@dataclass(frozen=True)
class Where:
    fleet: str
    slot: int | None  # None: every slot of the fleet

    def __str__(self) -> str:
        return self.fleet if self.slot is None else f"{self.fleet}/{self.slot}"


@dataclass(frozen=True)
class Workers:
    first: int | None = None  # None: all
    last: int | None = None

    def pick(self, targets: Sequence[Target]) -> list[Target]:
        if self.first is None:
            return list(targets)
        last = self.first if self.last is None else self.last
        if last >= len(targets):
            raise CommandError(f"worker {last} does not exist: the node has {len(targets)}")
        return [t for t in targets if self.first <= t.worker <= last]


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
    try:
        (target,) = Workers(worker).pick(_slice(config, snapshot, w.fleet, w.slot))
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
    run_dir = layout.attempt_dir(snapshot.slots[(w.fleet, w.slot)].run_id, attempt)
    command = log_tail_command(run_dir, lines=lines, follow=follow)
    async with _connections(config) as pool:
        return await _stream(pool, target, command, out, err)


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
    targets = _select(config, snapshot, parse_where(where), parse_workers(workers), err)
    if not targets:
        return 1
    async with _connections(config) as pool:
        results = await run_on_all(
            [t for _, t in targets],
            command,
            pool=pool,
            command_timeout=None,
            tail_bytes=16 * 1024 * 1024,
            label="exec",
        )
    status = 0
    for (prefix, _), r in zip(targets, results, strict=True):
        for line in r.stdout_tail.splitlines():
            out.write(f"{prefix}: {line}\n")
        for line in r.stderr_tail.splitlines():
            err.write(f"{prefix}: {line}\n")
        if not r.completed:
            err.write(f"{prefix}: {_failure(r)}\n")
        status = max(status, _status(r))
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
        file = await asyncio.to_thread(FileUpload.from_local, source, path)
    except FileNotFoundError as exc:
        raise CommandError(f"{source}: no such file") from exc
    except IsADirectoryError as exc:
        raise CommandError(f"{source}: is a directory (cp copies one file)") from exc
    except OSError as exc:
        raise CommandError(f"{source}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # FileUpload refuses what is not a regular file
        raise CommandError(_not_a_file(source)) from exc
    targets = _select(config, snapshot, where, parse_workers(workers), err)
    if not targets:
        return 1
    async with _connections(config) as pool:
        results = await upload([t for _, t in targets], [file], pool=pool)
    failed = 0
    for (prefix, _), r in zip(targets, results, strict=True):
        if r.ok:
            out.write(f"{prefix}: {path} ({len(file.content)} bytes)\n")
        else:
            failed += 1
            err.write(f"{prefix}: {_failure(r)}\n")
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# Helpers


def _not_a_file(source: str) -> str:
    """Why `source` cannot be copied, said once: missing, a directory, or something else."""
    if not os.path.lexists(source):
        return f"{source}: no such file"
    if os.path.isdir(source):
        return f"{source}: is a directory (cp copies one file)"
    if not os.path.exists(source):
        return f"{source}: a broken symbolic link"
    return f"{source}: not a regular file"


def _slice(config: Config, snapshot: Snapshot, fleet: str, slot: int) -> list[Target]:
    """The targets of a slot's READY node, pinned as the daemon pinned them; of every slice
    of a multislice slot, its workers numbered slice by slice as the daemon numbers them."""
    if (fleet, slot) not in snapshot.slots:
        known = fleet in {f for f, _ in snapshot.slots}
        raise CommandError(f"{fleet}/{slot}: no such slot" if known else f"unknown fleet {fleet}")
    members = _members(snapshot, fleet, slot)
    if not members:
        raise _NotReady(f"{fleet}/{slot}: the node is not READY (no node)")
    targets: list[Target] = []
    for inc in members:
        workers = snapshot.workers_of(inc.id)
        if inc.phase is not NodePhase.READY or not workers:
            which = f" (slice {inc.slice}, {inc.node_name})" if len(members) > 1 else ""
            raise _NotReady(f"{fleet}/{slot}: the node is not READY ({inc.phase.value}){which}")
        ssh = config.ssh
        try:
            mine = targets_for_node(
                [WorkerEndpoint(w.index, w.internal_ip, w.external_ip) for w in workers],
                user=ssh.user,
                port=ssh.port,
                internal_ip=ssh.internal_ip,
                pinned_host_keys={w.index: w.host_keys for w in workers},
                incarnation=str(inc.id),
            )
        except ValueError as exc:
            raise _NotReady(f"{fleet}/{slot}: {exc}") from exc
        offset = len(targets)
        targets += [replace(t, worker=offset + t.worker) for t in mine]
    return targets


def _members(snapshot: Snapshot, fleet: str, slot: int) -> list[IncarnationRecord]:
    """The slot's live incarnations, by slice (one, unless it is a multislice slot)."""
    found = [i for (f, s, _), i in snapshot.nodes.items() if (f, s) == (fleet, slot)]
    return sorted(found, key=lambda i: i.slice)


class _NotReady(Exception):
    pass


def _select(
    config: Config, snapshot: Snapshot, where: Where, workers: Workers, err: TextIO
) -> list[tuple[str, Target]]:
    """(prefix, target) for every selected worker; slots without a READY node are named on
    `err` and skipped (a named slot without one is the only slot, so nothing is selected)."""
    if where.slot is not None:
        slots = [where.slot]
    else:
        slots = sorted(i for f, i in snapshot.slots if f == where.fleet)
        if not slots:
            raise CommandError(f"unknown fleet {where.fleet}")
    selected: list[tuple[str, Target]] = []
    for slot in slots:
        try:
            targets = workers.pick(_slice(config, snapshot, where.fleet, slot))
        except _NotReady as exc:
            err.write(f"{exc}\n")
            continue
        selected += [(f"{where.fleet}/{slot}/{t.worker}", t) for t in targets]
    return selected


@contextlib.asynccontextmanager
async def _connections(config: Config) -> AsyncIterator[ConnectionPool]:
    """A connection pool with the daemon's key, for one command."""
    key = await asyncio.to_thread(_load_key, Path(config.ssh.key))
    async with ConnectionPool(key, concurrency=config.ssh.concurrency) as pool:
        yield pool


def _load_key(path: Path) -> asyncssh.SSHKey:
    """The daemon's key; never generated here (no node would accept a new one)."""
    if not path.exists():
        raise CommandError(f"no SSH key at {path}: the daemon creates it when it starts")
    try:
        return ensure_client_key(path)
    except KeyFileError as exc:
        raise CommandError(str(exc)) from exc


async def _stream(pool: ConnectionPool, target: Target, command: str, out: BinaryIO,
                  err: TextIO) -> int:  # fmt: skip
    """Run `command` on one worker, copying its output as it comes."""
    try:
        async with pool.lease(target) as lease:
            proc = await lease.connection.conn.create_process(command, encoding=None)
            await asyncio.gather(_copy(proc.stdout, out), _copy_text(proc.stderr, err))
            await proc.wait_closed()
    except CLASSIFIED_ERRORS as exc:
        err.write(f"worker {target.worker}: {classify(exc).value}: {describe(exc)}\n")
        return SSH_FAILED
    return proc.exit_status if proc.exit_status is not None else SSH_FAILED


async def _copy(stream: asyncssh.SSHReader[bytes], out: BinaryIO) -> None:
    while chunk := await stream.read(65536):
        out.write(chunk)
        out.flush()


async def _copy_text(stream: asyncssh.SSHReader[bytes], err: TextIO) -> None:
    while chunk := await stream.read(65536):
        err.write(chunk.decode(errors="replace"))


def _failure(r: WorkerResult) -> str:
    if r.error is not None:
        return f"ssh {r.error.value}: {r.error_message}"
    if r.exit_signal is not None:
        return f"killed by SIG{r.exit_signal}"
    return f"exit {r.exit_status}"


def _status(r: WorkerResult) -> int:
    """As a shell reports it: the exit status, 128 + the signal, 255 for SSH failures."""
    if r.error is not None:
        return SSH_FAILED
    if r.exit_signal is not None:
        try:
            return 128 + signal.Signals[f"SIG{r.exit_signal}"].value
        except KeyError:
            return SSH_FAILED
    return r.exit_status or 0
