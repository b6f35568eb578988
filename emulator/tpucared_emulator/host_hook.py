"""The seam for the simulated worker hosts: `WorkerHosts`, and `NoWorkerHosts`, its default.

The driver (driver.py) calls `start(node)` when a node becomes READY and `stop(node)` when it
stops being usable (preempted, terminated, vanished, deleted, stopped), from the host events
the state queues. `NoWorkerHosts` does nothing; `hosts.SshWorkerHosts` runs a real SSH server
per worker (`EmulatorOptions.ssh_hosts`). It sits above the records it hands over (a `Node`,
resources.py, whose workers are workers.py's).
"""

from __future__ import annotations

from typing import Protocol

from tpucared_emulator.resources import Node


class WorkerHosts(Protocol):
    """Simulated worker machines. Called from the emulator's driver task, in order per node."""

    async def start(self, node: Node) -> None:
        """The node became READY: bring up one host per worker at `worker.ip`."""
        ...

    async def notice(self, node: Node) -> None:
        """`node` got its preemption notice (it stays READY until it is preempted)."""
        ...

    async def stop(self, node: Node) -> None:
        """The node is no longer usable: kill its processes and close its hosts."""
        ...

    async def close(self) -> None:
        """The emulator is shutting down: stop every host."""
        ...


class NoWorkerHosts:
    """The API-only emulator: nodes have addresses and host keys but nothing listens."""

    async def start(self, node: Node) -> None:
        return None

    async def notice(self, node: Node) -> None:
        return None

    async def stop(self, node: Node) -> None:
        return None

    async def close(self) -> None:
        return None
