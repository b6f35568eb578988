"""The host keys pinned for the workers of a node incarnation: the Launcher port's `HostKeys`.

Owns `WorkerHosts`, what the SSH launcher is given (by the wiring, launchers.py) to check each
worker's host key. Host keys are pinned per incarnation (a recreated node has new keys under
the same name): from what the node's cloud publishes when a fetcher is given (what gcloud does;
launchers.py `guest_attribute_host_keys`, `Cloud.host_keys`), else trust on first use. Either
way the pins are stored with the worker records (`Tx.pin_host_keys`), so a daemon restart keeps
them and a changed key within one incarnation is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import structlog

from tpucared.core.model.records import IncarnationRecord, WorkerRecord
from tpucared.store import NotFound, StaleWrite, Store

log = structlog.get_logger(__name__)

# worker index -> OpenSSH public key lines, for one node incarnation.
HostKeyFetcher = Callable[[IncarnationRecord], Awaitable[Mapping[int, Sequence[str]]]]

# Guest attribute reads per incarnation before settling for trust on first use: the guest
# agent publishes the keys shortly after boot, and the first SSH connection pins them anyway.
_MAX_FETCHES = 3
_MAX_REMEMBERED = 4096  # incarnations whose guest-attribute reads are counted


class WorkerHosts:
    """The stored pins (the port's `HostKeys`), fetched from the cloud when a worker has none."""

    def __init__(self, store: Store, fetch_host_keys: HostKeyFetcher | None = None) -> None:
        self._store = store
        self._fetch = fetch_host_keys
        self._fetches: dict[int, int] = {}  # incarnation id -> guest attribute reads so far

    async def pins(
        self, inc: IncarnationRecord, workers: Sequence[WorkerRecord]
    ) -> dict[int, tuple[str, ...]]:
        """Every worker's pins, by index, with what the cloud publishes for those without."""
        pins = {w.index: tuple(w.host_keys) for w in workers}
        if self._fetch is not None and any(not keys for keys in pins.values()):
            pins.update(await self._pin_from_guest_attributes(inc, pins))
        return pins

    async def _pin_from_guest_attributes(
        self, inc: IncarnationRecord, pins: Mapping[int, tuple[str, ...]]
    ) -> dict[int, tuple[str, ...]]:
        assert self._fetch is not None
        tries = self._fetches.get(inc.id, 0)
        if tries >= _MAX_FETCHES:
            return {}
        self._fetches[inc.id] = tries + 1
        if len(self._fetches) > _MAX_REMEMBERED:
            # Weeks of recreations: forget the oldest incarnations (ids only grow, and an
            # ended one is never asked about again), so the map stays bounded.
            for old in sorted(self._fetches)[: len(self._fetches) - _MAX_REMEMBERED]:
                del self._fetches[old]
        try:
            found = await self._fetch(inc)
        # The fetcher is the daemon's (a cloud call): whatever it raises, SSH falls back to
        # trust on first use, which is what a node without guest attributes gets anyway.
        except Exception as exc:
            log.warning("workload.host_keys_unavailable", node=inc.node_name, error=str(exc))
            return {}
        fresh = {i: tuple(keys) for i, keys in found.items() if i in pins and not pins[i]}
        return await self._store_pins(inc, fresh)

    async def remember(self, inc: IncarnationRecord, seen: Mapping[int, str]) -> None:
        """Trust on first use: pin the key each worker that had no pin presented (`seen`),
        unless one was pinned meanwhile."""
        if not seen:
            return  # the usual case: every worker pinned, nothing to read or write
        async with self._store.read() as r:
            current = (await r.workers([inc.id])).get(inc.id, ())
        unpinned = {w.index for w in current if not w.host_keys}
        fresh = {i: (key,) for i, key in seen.items() if i in unpinned}
        if fresh:
            await self._store_pins(inc, fresh)

    async def _store_pins(
        self, inc: IncarnationRecord, pins: Mapping[int, tuple[str, ...]]
    ) -> dict[int, tuple[str, ...]]:
        stored: dict[int, tuple[str, ...]] = {}
        for worker, keys in sorted(pins.items()):
            try:
                async with self._store.write() as tx:
                    record = await tx.pin_host_keys(inc.id, worker, keys)
            except StaleWrite as exc:
                # Another key was pinned meanwhile: keep that one; the mismatch surfaces as
                # an unreachable worker (host_key_mismatch) and the planner decides.
                log.error("workload.host_key_conflict", node=inc.node_name, worker=worker,
                          error=str(exc))  # fmt: skip
                continue
            except NotFound:
                continue  # the incarnation's workers changed meanwhile: nothing to pin
            stored[worker] = tuple(record.host_keys)
        if stored:
            log.info("workload.host_keys_pinned", node=inc.node_name, workers=sorted(stored))
        return stored
