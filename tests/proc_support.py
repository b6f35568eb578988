"""What the tests ask this machine about processes and ports, read from /proc and with
a connect: is a process alive, who is left in a process group, does a port answer. Shared by
the emulator's worker-host tests and the workload harness (tests/runtime/workload_harness.py).
"""

from __future__ import annotations

import socket
from pathlib import Path


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members
