"""The real daemon against the emulator, one READY TPU node for which the cloud announces a
host-maintenance window (`:schedule-maintenance`, issue 41 item 1): the window shows in
`tpucared status` (text and --json), as the `/metrics` gauge of its start, and as exactly one
`node.maintenance_scheduled` event however many ticks list it."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import datetime

import pytest
from runtime_support import SLOW, Rig, converged, query, tpucared, wait_for, write_config

from bench.common import free_port
from bench.daemon_config import PROJECT, ZONE

pytestmark = pytest.mark.slow

DAYS_3 = 3 * 86400


async def test_a_scheduled_window_is_seen_shown_counted_and_told_once(rig: Rig) -> None:
    tmp_path, control, daemons = rig.tmp_path, rig.control, rig.daemons
    db, port = tmp_path / "state.db", free_port()
    config = write_config(tmp_path, control.emulator.url, size=1, http_port=port)
    daemon = await daemons(config).start()
    await wait_for(lambda: converged(control, db, 1), SLOW, "sweep-0 READY")
    path = f"/projects/{PROJECT}/locations/{ZONE}/nodes/sweep-0:schedule-maintenance"
    body = {"start_in_seconds": DAYS_3, "duration_seconds": 3600, "type": "SCHEDULED"}
    node = await control._call("POST", path, body)
    start = datetime.fromisoformat(node["maintenance"]["windowStartTime"])

    async def shown() -> dict[str, object] | None:
        code, out, err = await tpucared("status", "-c", str(config), "--json")
        assert code == 0, err
        [slot] = json.loads(out)["fleets"][0]["slots"]
        return slot["node"]["maintenance"]  # type: ignore[no-any-return]

    window = await wait_for(shown, SLOW, "the window in status --json")
    assert datetime.fromisoformat(str(window.pop("start"))) == start
    end = datetime.fromisoformat(str(window.pop("end")))
    assert (end - start).total_seconds() == 3600
    # The emulator lets a node Google lets start maintenance early (v4) say canReschedule.
    assert window == {"type": "SCHEDULED", "status": "PENDING", "can_reschedule": True}
    code, out, err = await tpucared("status", "-c", str(config))
    assert code == 0, err
    assert "ready, maintenance in 2d23h" in out, out

    series = 'tpucared_maintenance_window_start_seconds{fleet="sweep",slot="0"} '

    async def counted() -> float | None:
        async with control.session.get(f"http://127.0.0.1:{port}/metrics") as response:
            lines = (await response.text()).splitlines()
        return next((float(x.removeprefix(series)) for x in lines if x.startswith(series)), None)

    assert await wait_for(counted, SLOW, f"/metrics to show {series}") == start.timestamp()
    await asyncio.sleep(1.5)  # five more polls list the same window: nothing more to tell
    told = query(db, "SELECT details FROM events WHERE kind = 'node.maintenance_scheduled'")
    assert [datetime.fromisoformat(json.loads(r["details"])["start"]) for r in told] == [start]
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(SLOW) == 0
