"""Recording what a workload told in its progress file, as the slot's probes read it.

Where it sits: the probe jobs (jobs.py `_run_probe`) hand each probe of a slot to `seen`
once it is in; worker 0's progress (core/workload/progress.py `Progress`, parsed from
launch/sh/probe.sh's answer) is compared with what the attempt records, and what changed is
written on the attempt (store/write_progress.py), one small transaction, only when something
did. What each slot's attempt records is remembered, so a probe that brings nothing new costs
no store read; after a restart the first probe of a slot reads it once.
"""

from __future__ import annotations

from datetime import datetime

import structlog

from tpucared.core.vocab.snapshot import SlotKey
from tpucared.core.workload.inputs import SlotProbe
from tpucared.core.workload.progress import Recorded, advance
from tpucared.store import Store

log = structlog.get_logger(__name__)


class ProgressRecords:
    def __init__(self, store: Store) -> None:
        self._store = store
        # Per slot: the attempt number, what it records, and when it started.
        self._known: dict[SlotKey, tuple[int, Recorded, datetime]] = {}

    async def seen(self, probe: SlotProbe) -> None:
        """Record worker 0's progress in `probe`, if it tells anything new."""
        first = probe.worker(0)
        if probe.attempt is None or first is None or first.progress is None:
            return
        key = (probe.fleet, probe.slot)
        known = self._known.get(key)
        if known is None or known[0] != probe.attempt:
            async with self._store.read() as r:
                newest = await r.workload_attempts(probe.fleet, probe.slot, limit=1)
            if not newest or newest[0].number != probe.attempt:
                return  # another attempt since: its own probes will tell
            a = newest[0]
            recorded = Recorded(a.first_step_at, a.last_step, a.last_step_at, a.last_checkpoint,
                                a.last_checkpoint_at)  # fmt: skip
            known = (a.number, recorded, a.started_at)
            self._known[key] = known
        number, recorded, started_at = known
        changes = advance(recorded, first.progress, probe.observed_at, started_at)
        if not changes:
            return
        async with self._store.write() as tx:
            await tx.record_progress(probe.fleet, probe.slot, number, changes)
        self._known[key] = (number, recorded.updated(changes), started_at)
        log.debug("workload.progress", fleet=probe.fleet, slot=probe.slot, attempt=number,
                  **{k: str(v) for k, v in changes.items()})  # fmt: skip
