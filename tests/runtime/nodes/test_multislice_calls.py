"""The cloud calls of a queued multislice slot (issue 13), in process against the emulator.

Its slices share one queued resource, so every slice's delete is that queued resource's
forced delete. While one is in flight the others wait (`CloudCalls.name_busy`): a second
delete sent meanwhile met 409 CONFLICT, was retried after the slot's new queued resource (same
name) had been queued, and deleted it (found by
tests/runtime/workload/test_multislice_daemon.py under load). Here every queued resource delete
takes a second, so the second slice's delete always meets the first in flight.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from runtime_support import Control
from test_inprocess import harness

from tpucared.core.model.records import NodePhase
from tpucared.core.vocab.actions import CreateNode, DeleteNode
from tpucared.runtime.nodes.executor import POSTPONED
from tpucared.runtime.nodes.records import Outcome

pytestmark = pytest.mark.timeout(120)

P = NodePhase
FLEET = """
[[fleet]]
name = "ms"
zones = ["us-central2-b"]
accelerator_type = "v4-8"
runtime_version = "tpu-ubuntu2204-base"
size = 1
slices = 2
capacity = "spot"
provisioning = "queued"
"""


async def test_one_delete_of_a_shared_queued_resource_at_a_time_and_none_after_its_successor(
    tmp_path: Path, control: Control
) -> None:
    async with harness(tmp_path, control, size=0, extra_fleets=FLEET) as h:

        async def ready(count: int, rounds: int = 60) -> list[int]:
            for _ in range(rounds):
                await h.tick()
                await h.calls_done()
                await h.run_watcher(0.2)
                live = (await h.store.load_snapshot()).nodes
                ids = [i.id for k, i in sorted(live.items()) if i.phase is P.READY]
                if len(ids) == count:
                    return ids
            raise AssertionError(f"{count} slices never READY")

        first = await ready(2)
        await control.faults(
            {"latency_ms": 1000, "paths": ["/queuedResources"], "methods": ["DELETE"]}
        )
        await control.node_action("ms-0-1", "preempt")
        outcomes: list[tuple[str, Outcome]] = []
        for _ in range(8):  # until both old slices have asked for their delete
            tick = await h.tick()
            outcomes += [
                (a.node_name, outcome)
                for a, outcome in tick.execution.outcomes
                if isinstance(a, DeleteNode | CreateNode)
            ]
            await asyncio.sleep(0.2)
            if any(o == POSTPONED for _, o in outcomes):
                break
        # The second slice waited for the first's delete, instead of sending its own.
        assert (DeleteNode, POSTPONED) in [
            (DeleteNode, o) for n, o in outcomes if n in ("ms-0-0", "ms-0-1")
        ], outcomes
        await control.faults({})
        second = await ready(2)
        assert not set(first) & set(second)  # the whole queued resource was replaced

    log = [r for r in await control.requests() if "/queuedResources" in r["path"]]
    deletes = [r for r in log if r["method"] == "DELETE"]
    posts = [r for r in log if r["method"] == "POST"]
    assert len(posts) == 2
    assert deletes
    assert all(r["status"] != 409 for r in deletes), deletes
    assert all(r["time"] < posts[1]["time"] for r in deletes)  # none reached the new one
