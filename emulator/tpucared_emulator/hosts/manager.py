"""SshWorkerHosts: the emulator's simulated worker machines, one SSH server per worker.

Implements the `WorkerHosts` hook (workers.py) that the driver calls in order per node:
`start(node)` when it becomes READY brings up a `SimulatedWorker` (worker.py) on every worker
address; `stop(node)` when it stops being usable (preempted, terminated, deleted, vanished,
stopped) kills every process of the node, detached workloads included (processes.py), and
closes its servers and connections; `close()` does that for every node at emulator shutdown.

Each node incarnation gets a directory, `<root>/<project>/<zone>/<node id>-<uid>/worker-<i>/`
(home, tmp, dev; see worker.py). A stop/start of a single-host on-demand node keeps it, as a
VM keeps its disk; any other stop removes it, as a preempted or deleted TPU VM's disk is gone.
The root is a temporary directory removed at `close()` unless one is given (`--hosts-dir`).

Cost at scale: host keys are made on first use (ed25519: microseconds), one listening socket
and a few small objects per idle worker, no process until a command runs, and a node on which
nothing ever ran is stopped without scanning /proc.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from tpucared_emulator.hosts.processes import TAG_HOSTS, TAG_NODE, TAG_WORKER, kill_tagged
from tpucared_emulator.hosts.worker import SimulatedWorker

if TYPE_CHECKING:
    from tpucared_emulator.options import EmulatorOptions
    from tpucared_emulator.oslogin import OsLoginRegistry
    from tpucared_emulator.resources import Node

log = structlog.get_logger(__name__)

# A VM that may come back with its disk: only these nodes can be stopped and started again.
_RESTARTABLE_STATES = frozenset({"STOPPING", "STOPPED", "STARTING", "READY"})
_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes256-ctr")
# When PATH is unset (rare): what a Debian/Ubuntu login gets.
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _keeps_disk(node: Node) -> bool:
    """Whether the node may come back with this disk: a single-host on-demand node being
    stopped (nodes.stop refuses every other kind), or any node down for host maintenance.
    Read when the hook runs, so a node stopped and started again since counts too."""
    if node.host_maintenance is not None and node.host_maintenance.down:
        return True  # down for host maintenance: it boots again from the same disks
    return len(node.workers) == 1 and not node.preemptible and node.state in _RESTARTABLE_STATES


def _make_dirs(workers: list[SimulatedWorker]) -> None:
    for worker in workers:
        worker.make_dirs()


class HostStartError(RuntimeError):
    """Some workers of a node could not start their SSH server (their address:port is taken)."""


class _NodeHosts:
    """The running workers of one node incarnation."""

    def __init__(self, node: Node, key: str, directory: Path, workers: list[SimulatedWorker]):
        self.node = node
        self.key = key
        self.directory = directory
        self.workers = workers


class SshWorkerHosts:
    """Simulated worker VMs reachable over SSH at their node's network endpoints."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        port: int = 22,
        shell: str | None = None,
        login_timeout: float = 30.0,
        os_login: OsLoginRegistry | None = None,
    ) -> None:
        self.port = port
        # When set, OS Login is enforced: workers ask it, not the node's ssh-keys metadata.
        self.os_login = os_login
        # Distinguishes this emulator's processes from another emulator's on the same machine.
        self.token = secrets.token_hex(8)
        self.shell = shell or shutil.which("bash") or "/bin/sh"
        self._path = os.environ.get("PATH") or _DEFAULT_PATH
        self._root_arg = Path(root) if root is not None else None
        self._root: Path | None = None
        self._own_root = False
        self._nodes: dict[str, _NodeHosts] = {}
        self._closed = False
        # Shared by every worker; each adds its own host key and command handler (asyncssh
        # refuses to build server options without a host key, so these stay keyword arguments).
        self._options: dict[str, object] = dict(
            config=None,
            login_timeout=login_timeout,
            password_auth=False,
            kbdint_auth=False,
            gss_host=None,
            allow_pty=False,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,
            encoding=None,
            # AES-GCM first: asyncssh does chacha20-poly1305 in Python with a cipher object per
            # packet, which made it the top cost of a 256-worker fan-out (client side too, as
            # the server's list restricts the choice). OpenSSH clients support AES-GCM as well.
            encryption_algs=_CIPHERS,
        )

    @classmethod
    def from_options(
        cls, options: EmulatorOptions, *, os_login: OsLoginRegistry | None = None
    ) -> SshWorkerHosts:
        return cls(options.hosts_dir, port=options.ssh_port, os_login=os_login)

    # -----------------------------------------------------------------------------------------
    # Where things are.

    @property
    def root(self) -> Path:
        """The directory holding every node's worker directories (made on first use)."""
        if self._root is None:
            if self._root_arg is not None:
                self._root_arg.mkdir(parents=True, exist_ok=True)
                self._root = self._root_arg
            else:
                self._root = Path(tempfile.mkdtemp(prefix="tpucared-emulator-hosts-"))
                self._own_root = True
        return self._root

    @staticmethod
    def node_key(node: Node) -> str:
        """The node incarnation: a recreated node of the same name is another machine."""
        return f"{node.name}#{node.uid}"

    def node_dir(self, node: Node) -> Path:
        return self.root / node.project / node.zone / f"{node.node_id}-{node.uid}"

    def worker_dir(self, node: Node, index: int) -> Path:
        return self.node_dir(node) / f"worker-{index}"

    def home(self, node: Node, index: int) -> Path:
        return self.worker_dir(node, index) / "home"

    def tags(self, node: Node | None = None) -> dict[str, str]:
        """The environment tags of this emulator's processes (of one node, if given)."""
        tags = {TAG_HOSTS: self.token}
        if node is not None:
            tags[TAG_NODE] = self.node_key(node)
        return tags

    def running(self, node: Node) -> bool:
        return self.node_key(node) in self._nodes

    # -----------------------------------------------------------------------------------------
    # The WorkerHosts hook.

    async def start(self, node: Node) -> None:
        if self._closed:
            raise RuntimeError("worker hosts are closed")
        key = self.node_key(node)
        if key in self._nodes:
            return
        directory = self.node_dir(node)
        workers = [
            SimulatedWorker(
                node,
                worker,
                directory / f"worker-{worker.index}",
                port=self.port,
                shell=self.shell,
                path=self._path,
                tags={**self.tags(node), TAG_WORKER: str(worker.index)},
                options=self._options,
                os_login=self.os_login,
            )
            for worker in node.workers
        ]
        # Registered before starting, so a failed start is still cleaned up by stop().
        self._nodes[key] = _NodeHosts(node, key, directory, workers)
        await asyncio.to_thread(_make_dirs, workers)
        results = await asyncio.gather(*(w.start() for w in workers), return_exceptions=True)
        failed = [(w, r) for w, r in zip(workers, results, strict=True) if r is not None]
        for _, error in failed:
            if not isinstance(error, Exception):
                raise error  # cancellation and the like
        if failed:
            detail = "; ".join(f"{w.worker.ip}:{self.port}: {e}" for w, e in failed)
            raise HostStartError(
                f"{len(failed)} of {len(workers)} workers of {node.name} cannot listen: {detail}"
            )
        log.info("emulator.hosts.started", node=node.name, workers=len(workers), port=self.port)

    async def notice(self, node: Node) -> None:
        """The node got its preemption notice: its workers' metadata servers say so."""
        hosts = self._nodes.get(self.node_key(node))
        for worker in hosts.workers if hosts is not None else ():
            worker.metadata.notify()

    async def stop(self, node: Node) -> None:
        key = self.node_key(node)
        hosts = self._nodes.get(key)
        if hosts is None:
            return
        scan = any(w.spawned for w in hosts.workers)
        await self._shutdown(hosts.workers, self.tags(node) if scan else None)
        # Forgotten only once shut down: a stop cut short (the emulator stopping meanwhile)
        # leaves the node to close(), which shuts it down again (halting twice is harmless),
        # so no server of it (SSH, metadata) outlives the emulator.
        self._nodes.pop(key, None)
        if not _keeps_disk(node):
            await asyncio.to_thread(shutil.rmtree, hosts.directory, ignore_errors=True)
        log.info("emulator.hosts.stopped", node=node.name, state=node.state)

    async def close(self) -> None:
        self._closed = True
        workers = [w for hosts in self._nodes.values() for w in hosts.workers]
        self._nodes.clear()
        # Always scanned: also catches what a failed stop() left behind.
        await self._shutdown(workers, self.tags())
        if self._own_root and self._root is not None:
            await asyncio.to_thread(shutil.rmtree, self._root, ignore_errors=True)
            self._root = None

    async def _shutdown(self, workers: list[SimulatedWorker], tags: dict[str, str] | None) -> None:
        for worker in workers:
            worker.halt()
        if tags is not None:
            survivors = await kill_tagged(tags)
            if survivors:
                log.error("emulator.hosts.unkillable", pids=survivors, tags=tags)
        await asyncio.gather(*(w.wait_closed() for w in workers))

    # -----------------------------------------------------------------------------------------
    # Fault injection.

    async def wedge(self, node: Node, index: int, *, stubborn: bool = False) -> dict[str, Any]:
        """Leave worker `index`'s TPU held (see SimulatedWorker.hold_accelerator); KeyError if
        the node's hosts are not running, IndexError for a worker it does not have."""
        hosts = self._nodes[self.node_key(node)]
        if not 0 <= index < len(hosts.workers):
            raise IndexError(f"node {node.name} has workers 0..{len(hosts.workers) - 1}")
        return await hosts.workers[index].hold_accelerator(stubborn=stubborn)
