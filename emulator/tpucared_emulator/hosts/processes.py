"""Finding and killing every process of a simulated worker, detached ones included.

Commands on a simulated host are ordinary local processes. A workload launched the way
tpucared launches it (`setsid -f`, see tpucared/launch/sh/launch.sh) leaves the SSH server's process
tree at once: it is reparented to init, in its own session, so neither the tree nor a process
group leads to it later. Instead every command starts with tag variables in its environment,
which every descendant inherits:

    TPUCARED_EMULATOR_HOSTS=<token of one SshWorkerHosts>   (one emulator instance)
    TPUCARED_EMULATOR_NODE=<node incarnation key>
    TPUCARED_EMULATOR_WORKER=<worker index>

Killing a node scans /proc/<pid>/environ for its tags. That file shows the environment the
process was exec'ed with, so a process cannot hide by unsetting the variable; a program it
execs afterwards without the variable (`env -i ...`) is untagged, but it is still in the process
group of a tagged ancestor (a workload shares the group of its tagged launch wrapper), and the
group of every tagged process is killed too. What escapes: an untagged program that also starts
its own session. A scan reads one small file per process on the machine (~10 ms for 1000
processes) and runs in a worker thread; processes of other users cannot be read and are skipped
(they are not ours to kill).

Without /proc (not Linux) only the command processes themselves and their process groups are
killed (`SimulatedWorker` tracks those); detached descendants survive there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterable, Mapping

TAG_HOSTS = "TPUCARED_EMULATOR_HOSTS"
TAG_NODE = "TPUCARED_EMULATOR_NODE"
TAG_WORKER = "TPUCARED_EMULATOR_WORKER"

PROC = "/proc"


def find_tagged(tags: Mapping[str, str], proc: str = PROC) -> list[int]:
    """Pids of live processes whose environment holds every `NAME=value` of `tags`.

    Zombies are not listed: their environ reads empty (they are dead, only not yet reaped).
    """
    needles = [f"\0{name}={value}\0".encode() for name, value in tags.items()]
    own = os.getpid()
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    pids = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == own:
            continue
        try:
            with open(f"{proc}/{entry}/environ", "rb") as handle:
                environ = b"\0" + handle.read()
        except OSError:
            continue  # exited meanwhile, or another user's process
        if all(needle in environ for needle in needles):
            pids.append(int(entry))
    return pids


def kill_processes(pids: Iterable[int], groups: Iterable[int] = ()) -> None:
    """SIGKILL each process and each process group (given, and those of the processes).

    Groups first, so a member cannot fork a replacement between the two. Never the
    emulator's own process or group, whatever a confused caller passes.
    """
    pids = set(pids) - {os.getpid()}
    all_groups = set(groups)
    for pid in pids:
        with contextlib.suppress(OSError):
            all_groups.add(os.getpgid(pid))
    all_groups -= {os.getpgrp(), 0, 1}
    for group in all_groups:
        with contextlib.suppress(OSError):  # gone already, or not ours
            os.killpg(group, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


async def kill_tagged(tags: Mapping[str, str], *, patience: float = 5.0) -> list[int]:
    """Kill every process carrying `tags` until none is left; returns what survived `patience`
    seconds.

    Scans again after each round, because a process may have forked between the scan and the
    kill; a survivor is one in uninterruptible sleep (a hung NFS read), which SIGKILL only
    reaches when the kernel lets go of it.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        pids = await asyncio.to_thread(find_tagged, tags)
        if not pids or loop.time() >= deadline:
            return pids
        kill_processes(pids)
        await asyncio.sleep(0.01)  # let the kernel tear them down before looking again
