"""A Compute Engine fleet's `on_maintenance = "now"` end to end (issue 41 item 2, the Compute
half): the real daemon, the emulator's SSH hosts, one on-demand TPU7x VM whose cloud announces
a host-maintenance window 12 s ahead while attempt 1 trains (`resourceStatus.
upcomingMaintenance`). With `maintenance_lead = "10s"` the workload gets its stop signal
before the window, checkpoints and exits; attempt 1 ends preempted (never a failure); the
daemon then starts the maintenance itself (`instances.performMaintenance`, once, with a
requestId). The maintenance terminates the VM (TPU VMs cannot live-migrate; tpucared makes them
with `automaticRestart: false`, so it stays down): the daemon deletes it as lost to maintenance
and makes the slot's VM again, and attempt 2 runs on it, from attempt 1's checkpoint, before
the announced window would even have begun.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import (
    MACHINE,
    PROJECT,
    SLOW,
    ZONE,
    Control,
    Daemon,
    compute_instances,
    hosts_emulator_options,
    query,
    wait_for,
)
from test_maintenance_policy_daemon import RUN, _starts  # the same toy training, its record

from bench import daemon_config

pytestmark = pytest.mark.timeout(240)

FLEET = "iron"
START_IN = 12.0  # the window's start, seconds after it is announced
LENGTH = 2.0  # and how long it lasts (the VM is down that long once it starts)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    # The in-VM TERMINATE_ON_HOST_MAINTENANCE notice 0.5 s before the termination; a stopping
    # VM stays STOPPING a moment, as a real one does.
    return hosts_emulator_options(
        emulator_options, tmp_path, maintenance_event_lead_seconds=0.5,
        compute_stopping_seconds=0.3,
    )  # fmt: skip


def _config(tmp_path: Path, control: Control, results: Path) -> Path:
    fleet = daemon_config.fleet(
        FLEET, api="compute", capacity="on-demand", machine_type=MACHINE,
        accelerator_type=None, runtime_version=None,
        workload={
            "run": RUN, "env": {"RESULTS": str(results)}, "stop_grace": "2s",
            "maintenance_lead": "10s", "on_maintenance": "now",
        },
    )  # fmt: skip
    config = daemon_config.against_emulator(
        control.emulator.url, fleet, poll="300ms", ssh={"port": control.emulator.options.ssh_port}
    )
    return daemon_config.write(tmp_path / "fleet.toml", config)


async def test_now_starts_a_vms_maintenance_at_the_checkpoint_and_resumes_before_the_window(
    control: Control, daemons: Callable[[Path], Daemon], tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    db = tmp_path / "state.db"
    await daemons(_config(tmp_path, control, results)).start()

    async def started(n: int) -> bool:
        return len(await asyncio.to_thread(_starts, results)) == n

    await wait_for(lambda: started(1), SLOW, "attempt 1 running")
    [vm] = await compute_instances(control, FLEET)
    announced = time.time()
    await control._call(
        "POST",
        f"/projects/{PROJECT}/zones/{ZONE}/instances/{vm['name']}:schedule-maintenance",
        {"start_in_seconds": START_IN, "duration_seconds": LENGTH, "type": "SCHEDULED"},
    )
    start = announced + START_IN

    async def signalled() -> bool:
        # The trap's redirection makes the file before `date` writes into it: wait for the text.
        term = results / "term-1"
        return await asyncio.to_thread(lambda: term.exists() and term.read_text().strip() != "")

    await wait_for(signalled, SLOW, "the stop signal before the window")
    at = float((results / "term-1").read_text())
    assert start - 10.5 < at < start, "the signal came at maintenance_lead, not later"
    await wait_for(lambda: started(2), SLOW, "attempt 2 after the early maintenance")

    starts = _starts(results)
    assert [(a, f) for a, f, _, _ in starts] == [(1, 0), (2, 0)]  # TPUCARED_FAILURES stays 0
    assert starts[1][2] < start, "the maintenance ran at the workload's moment, not the window's"
    checkpoint = int((results / "checkpoint").read_text())
    assert checkpoint > 0
    assert starts[1][3] == checkpoint
    (first,) = query(db, "SELECT outcome, detail FROM workload_attempts WHERE number = 1")
    assert first["outcome"] == "preempted"
    assert first["detail"].startswith("checkpointed before host maintenance"), first["detail"]
    (slot,) = query(db, "SELECT failures FROM slots WHERE fleet = ?", FLEET)
    assert slot["failures"] == 0
    events = query(db, "SELECT kind, details FROM events WHERE kind LIKE 'maintenance.%'")
    kinds = [e["kind"] for e in events]
    assert kinds == ["maintenance.checkpoint", "maintenance.start_asked", "maintenance.started"]
    assert json.loads(events[0]["details"])["signalled"] is True
    # tpucared makes its VMs with `automaticRestart: false` (gcp/compute/bodies.py: it replaces
    # a VM that stopped rather than have it restart under it), so the maintenance it started
    # terminates the VM for good: the daemon deletes it as lost to maintenance (never a
    # preemption, never a failure) and makes the slot's VM again, on which attempt 2 runs.
    rows = query(db, "SELECT cloud_id, phase, loss_cause, end_reason FROM nodes ORDER BY id")
    assert [(r["cloud_id"], r["phase"], r["loss_cause"], r["end_reason"]) for r in rows] == [
        (vm["instance"]["id"], "deleted", "maintenance", "host maintenance"),
        (rows[1]["cloud_id"], "ready", None, None),
    ]
    [after] = await compute_instances(control, FLEET)
    assert after["instance"]["id"] == rows[1]["cloud_id"] != vm["instance"]["id"]
    assert after["instance"]["scheduling"]["automaticRestart"] is False
    calls = [
        (r["method"], r["path"].rsplit("/", 1)[-1], r["status"])
        for r in await control.requests()
        if "/instances" in r["path"] and r["method"] != "GET"
    ]
    assert calls == [
        ("POST", "instances", 200),  # attempt 1's VM
        ("POST", "performMaintenance", 200),  # the early start, once
        ("DELETE", vm["name"], 200),  # the terminated VM
        ("POST", "instances", 200),  # attempt 2's
    ]
    [perform] = [r for r in await control.requests() if r["path"].endswith("/performMaintenance")]
    assert perform["query"]["requestId"]
