"""Long-lived SSH connections to workers, reused across commands and daemon ticks.

Owns `ConnectionPool`: one connection per (host, port, user, node incarnation), opened on first
use, shared by concurrent commands (asyncssh multiplexes channels), dropped on error, and a
global bound (`limit`) on the commands in flight across every fan-out that uses the pool. The
runtime keeps one pool for the daemon's life, so the periodic probe of every worker costs one
channel, not one handshake; `prune()` / `prune_incarnations()` forget incarnations that no
longer exist, and `max_connections` caps the idle connections kept (least recently used
closed first), so memory and file descriptors stay bounded however many workers there are.
`on_lost(target)` is told when a pooled connection ends without the pool closing it (the
worker's sshd went away: the runtime takes that as a hint that the node died).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType

import asyncssh

from tpucared.ssh.connect import Connection, client_options, open_connection
from tpucared.ssh.target import Target

_PoolKey = tuple[str, int, str, str | None]


@dataclass(frozen=True)
class Lease:
    connection: Connection
    reused: bool  # opened by an earlier lease: it may have died since (a preempted worker)


@dataclass
class _Entry:
    connection: Connection
    leases: int = 0  # blocks in flight that use it: never evicted or pruned while > 0


class PoolClosedError(RuntimeError):
    pass


class ConnectionPool:
    def __init__(
        self,
        key: asyncssh.SSHKey,
        *,
        concurrency: int = 64,
        connect_timeout: float = 10.0,
        max_connections: int | None = None,
        options: asyncssh.SSHClientConnectionOptions | None = None,
        on_lost: Callable[[Target], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.connect_timeout = connect_timeout
        # Bounds connects + commands in flight, so a fleet-wide relaunch cannot open hundreds of
        # handshakes at once ([ssh] concurrency in the config).
        self.limit = asyncio.Semaphore(concurrency)
        self._options = options or client_options(key)
        self._max_connections = max_connections
        self._entries: OrderedDict[_PoolKey, _Entry] = OrderedDict()
        # The entries no block uses, least recently used first: what eviction closes, found
        # without walking the connections in use (a thousand notice watches hold theirs).
        self._idle: OrderedDict[_PoolKey, None] = OrderedDict()
        self._connecting: dict[_PoolKey, asyncio.Lock] = {}
        self._closed = False
        # Told when a pooled connection ends without the pool closing it: the worker's sshd
        # went away (a preempted or rebooting VM) or the network dropped it.
        self.on_lost = on_lost

    def __len__(self) -> int:
        return len(self._entries)

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def lease(self, target: Target) -> AsyncIterator[Lease]:
        """A connection to `target` for the duration of the block, opened if needed.

        Connect errors propagate (see errors.classify). The connection stays pooled afterwards;
        call `discard()` when an error suggests it is dead.
        """
        if self._closed:
            raise PoolClosedError("connection pool is closed")
        key = target.pool_key
        # One connect per key at a time: concurrent users of a new worker share its handshake.
        lock = self._connecting.setdefault(key, asyncio.Lock())
        async with lock:
            entry = self._entries.get(key)
            reused = entry is not None and not entry.connection.conn.is_closed()
            if entry is None or not reused:
                if entry is not None:
                    self._forget(entry)
                opened: list[Connection] = []
                connection = await open_connection(
                    target,
                    self._options,
                    connect_timeout=self.connect_timeout,
                    on_lost=lambda: self._lost(opened),
                )
                opened.append(connection)
                if self._closed:
                    connection.conn.close()
                    raise PoolClosedError("connection pool closed while connecting")
                entry = _Entry(connection)
                self._entries[key] = entry
            self._entries.move_to_end(key)
            entry.leases += 1
            self._idle.pop(key, None)
        self._evict_idle()
        try:
            yield Lease(entry.connection, reused)
        finally:
            entry.leases -= 1
            if entry.leases == 0 and self._entries.get(key) is entry:
                self._idle[key] = None
            self._evict_idle()

    async def discard(self, connection: Connection) -> None:
        """Close `connection` and forget it, if it is still the pooled one for its target."""
        entry = self._entries.get(connection.target.pool_key)
        if entry is not None and entry.connection is connection:
            self._forget(entry)
        connection.conn.close()
        await _wait_closed([connection.conn])

    async def prune(self, keep: Iterable[Target]) -> None:
        """Close idle connections to anything not in `keep` (e.g. deleted incarnations)."""
        wanted = {t.pool_key for t in keep}
        doomed = [e for k, e in self._entries.items() if k not in wanted and e.leases == 0]
        for entry in doomed:
            self._forget(entry)
            entry.connection.conn.close()
        for key in [k for k, lock in self._connecting.items() if k not in wanted]:
            if not self._connecting[key].locked():
                del self._connecting[key]
        await _wait_closed([e.connection.conn for e in doomed])

    async def prune_incarnations(self, live: Iterable[str]) -> None:
        """Close idle connections to workers of node incarnations not in `live` (a recreated
        node has new workers under the same addresses). Connections without an incarnation
        are kept."""
        wanted = set(live)
        keep = [
            e.connection.target for k, e in self._entries.items() if k[3] is None or k[3] in wanted
        ]
        await self.prune(keep)

    async def close(self) -> None:
        self._closed = True
        conns = [e.connection.conn for e in self._entries.values()]
        self._entries.clear()
        self._idle.clear()
        self._connecting.clear()
        for conn in conns:
            conn.close()
        await _wait_closed(conns)

    def _lost(self, opened: list[Connection]) -> None:
        """A connection ended. Every close of the pool's own forgets the entry first, so a
        connection still pooled was ended by the other side (or the network)."""
        if self._closed or not opened:
            return
        connection = opened[0]
        entry = self._entries.get(connection.target.pool_key)
        if entry is None or entry.connection is not connection:
            return
        self._forget(entry)
        if self.on_lost is not None:
            self.on_lost(connection.target)

    def _forget(self, entry: _Entry) -> None:
        key = entry.connection.target.pool_key
        if self._entries.get(key) is entry:
            del self._entries[key]
            self._idle.pop(key, None)

    def _evict_idle(self) -> None:
        """Close least recently used idle connections beyond max_connections (fd budget)."""
        if self._max_connections is None:
            return
        excess = len(self._entries) - self._max_connections
        while excess > 0 and self._idle:
            entry = self._entries[next(iter(self._idle))]
            self._forget(entry)
            entry.connection.conn.close()
            excess -= 1


async def _wait_closed(conns: list[asyncssh.SSHClientConnection], grace: float = 5.0) -> None:
    if not conns:
        return
    # A dead peer must not hold up shutdown; close() already released our side.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(grace):
            await asyncio.gather(*(c.wait_closed() for c in conns), return_exceptions=True)
