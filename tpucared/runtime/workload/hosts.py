"""SSH targets for the workers of a node incarnation, with their host keys pinned.

Owns `WorkerHosts` (used by the workload runner) and `guest_attribute_host_keys` (the fetcher
the daemon passes it: what the node's cloud publishes of its workers' host keys,
`Cloud.host_keys`, the TPU API's guest attributes). Host keys are pinned per incarnation (a
recreated node has new keys under the same name): from what the cloud publishes when a fetcher
is given (what gcloud does), else trust on first use. Either way the pins are stored with the
worker records (`Tx.pin_host_keys`), so a daemon restart keeps them and a changed key within
one incarnation is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import structlog

from tpucared.config import SshConfig
from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.records import IncarnationRecord, WorkerRecord
from tpucared.ports.cloud import PublishedHostKeys
from tpucared.runtime.clouds import CloudMap
from tpucared.ssh import Target, WorkerResult, host_keys_from_guest_attributes, targets_for_node
from tpucared.store import NotFound, StaleWrite, Store

log = structlog.get_logger(__name__)

# worker index -> OpenSSH public key lines, for one node incarnation.
HostKeyFetcher = Callable[[IncarnationRecord], Awaitable[Mapping[int, Sequence[str]]]]

# Guest attribute reads per incarnation before settling for trust on first use: the guest
# agent publishes the keys shortly after boot, and the first SSH connection pins them anyway.
_MAX_FETCHES = 3
_MAX_REMEMBERED = 4096  # incarnations whose guest-attribute reads are counted


def guest_attribute_host_keys(clouds: CloudMap, project: str) -> HostKeyFetcher:
    """A fetcher reading what the node's cloud publishes of each worker's host keys
    (`Cloud.host_keys`), in the node's project (`project`, the daemon's own, for a record
    that names none)."""

    async def fetch(inc: IncarnationRecord) -> Mapping[int, Sequence[str]]:
        cloud = clouds.for_node(inc)
        return pins_from(await cloud.host_keys(inc.project or project, inc.zone, inc.node_name))

    return fetch


def pins_from(published: PublishedHostKeys) -> dict[int, tuple[str, ...]]:
    """{worker: pins} from what the cloud publishes; workers without keys are left out."""
    out: dict[int, tuple[str, ...]] = {}
    for index, pairs in published.items():
        keys = host_keys_from_guest_attributes([(k, v) for k, v in pairs if k and v])
        if keys:
            out[index] = keys
    return out


class WorkerHosts:
    def __init__(
        self, store: Store, ssh: SshConfig, fetch_host_keys: HostKeyFetcher | None = None
    ) -> None:
        self._store = store
        self._ssh = ssh
        self._fetch = fetch_host_keys
        self._fetches: dict[int, int] = {}  # incarnation id -> guest attribute reads so far

    async def targets(
        self, inc: IncarnationRecord, workers: Sequence[WorkerRecord]
    ) -> list[Target]:
        """One target per worker, ordered by index, with every pin known. ValueError when a
        worker lacks the address [ssh] asks for."""
        pins = {w.index: tuple(w.host_keys) for w in workers}
        if self._fetch is not None and any(not keys for keys in pins.values()):
            pins.update(await self._pin_from_guest_attributes(inc, pins))
        return targets_for_node(
            [WorkerEndpoint(w.index, w.internal_ip, w.external_ip) for w in workers],
            user=self._ssh.user,
            port=self._ssh.port,
            internal_ip=self._ssh.internal_ip,
            pinned_host_keys=pins,
            incarnation=str(inc.id),
        )

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

    async def remember(
        self, inc: IncarnationRecord, targets: Iterable[Target], results: Iterable[WorkerResult]
    ) -> None:
        """Trust on first use: pin the key each worker that had no pin presented."""
        unpinned_targets = {t.worker for t in targets if not t.pinned_host_keys}
        seen = {
            r.worker: (r.host_key,) for r in results if r.host_key and r.worker in unpinned_targets
        }
        if not seen:
            return  # the usual case: every worker pinned, nothing to read or write
        async with self._store.read() as r:
            current = (await r.workers([inc.id])).get(inc.id, ())
        unpinned = {w.index for w in current if not w.host_keys}
        fresh = {i: keys for i, keys in seen.items() if i in unpinned}
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
