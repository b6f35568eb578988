"""The real daemon against a hostile Compute Engine instance list (issue 27): never act on what
it does not understand. Two RUNNING spot VMs of a `compute` fleet, made by the daemon; then
every instance list it sends meets one mode of the emulator's `malformed` fault
(emulator/hostile.py) for a few seconds of ticks: a status nobody knows on every instance
(`state`: unreadable, never acted on) or the first instance listed again as TERMINATED
(`duplicate`: a list that makes no sense, the zone unknown). While it lasts: no delete and no
insert reaches the cloud and no slot counts a preemption; after it, the same two VMs are
RUNNING and live in the database. The fault is on GETs only, so the assertions are on the
cloud's request log, not on what the daemon says. (test_hostile_daemon.py covers every mode
for TPU API nodes.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import SLOW, Control, Daemon, live_nodes, query, wait_for

from bench import daemon_config

pytestmark = pytest.mark.slow

FLEET, SIZE, ZONE = "iron", 2, "us-central1-c"


def _config(tmp_path: Path, control: Control) -> Path:
    fleet = daemon_config.fleet(
        FLEET, api="compute", zones=[ZONE], machine_type="ct6e-standard-4t", size=SIZE,
        accelerator_type=None, runtime_version=None, capacity="spot",
    )  # fmt: skip
    config = daemon_config.against_emulator(
        control.emulator.url, fleet, poll="200ms", policy={"vanish_grace": "500ms"}
    )
    return daemon_config.write(tmp_path / "fleet.toml", config)


async def _running(control: Control, db: Path) -> dict[str, str]:
    """name -> instance id of our RUNNING VMs, when each is its slot's live READY record."""
    async with control.session.get(control.base + "/instances") as response:
        found = (await response.json())["instances"]
    ids = {i["name"]: i["instance"]["id"] for i in found if i["status"] == "RUNNING"}
    live = live_nodes(db, FLEET)
    recorded = {r["node_name"]: r["cloud_id"] for r in live.values() if r["phase"] == "ready"}
    return ids if len(ids) == SIZE and recorded == ids and len(found) == SIZE else {}


def _acting(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        r
        for r in requests
        if r["method"] == "DELETE" or (r["method"] == "POST" and r["path"].endswith("/instances"))
    ]


@pytest.mark.parametrize(
    ("mode", "fields"), [("state", {"value": "SOMETHING_NEW"}), ("duplicate", {})]
)
async def test_a_hostile_instance_list_makes_the_daemon_act_on_nothing(
    tmp_path: Path,
    control: Control,
    daemons: Callable[[Path], Daemon],
    mode: str,
    fields: dict[str, Any],
) -> None:
    db = tmp_path / "state.db"
    daemon = await daemons(_config(tmp_path, control)).start()
    before = await wait_for(lambda: _running(control, db), SLOW, f"{SIZE} RUNNING VMs")
    on = time.time()
    fault = {"error_rate": 1.0, "kinds": ["malformed"], "mode": mode, **fields}
    await control.faults({**fault, "paths": ["/instances"], "methods": ["GET"]})
    await asyncio.sleep(2.5)  # a dozen ticks at a 200 ms poll (fewer lists: the zone backs off)
    off = time.time()
    await control.faults({})

    during = [r for r in await control.requests(on) if r["time"] < off]
    assert [r for r in during if r["fault"] == "malformed"], "the daemon met the fault"
    assert _acting(during) == [], f"{mode}: the daemon acted while the list made no sense"
    after = await wait_for(lambda: _running(control, db), SLOW, "the same VMs, RUNNING")
    assert after == before
    assert _acting(await control.requests(on)) == []
    assert [r["preemptions"] for r in query(db, "SELECT preemptions FROM slots")] == [0] * SIZE
    if mode == "state":
        told = query(db, "SELECT message FROM events WHERE kind = 'notice'")
        assert any("SOMETHING_NEW" in r["message"] for r in told), [dict(r) for r in told]
    assert daemon.process is not None
    assert daemon.process.returncode is None
