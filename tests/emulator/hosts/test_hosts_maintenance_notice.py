"""Host-maintenance notices on the emulator's worker hosts (issue 41 item 2): run.sh's watchers
hold `instance/maintenance-event` from the run's start (the emulator, as Google, warns only a
VM that has read it), so TERMINATE_ON_HOST_MAINTENANCE reaches the workload as its stop signal,
exactly as a preemption notice does, with `notice_kind` saying `maintenance`; and
notice_wait.sh, the daemon's per-slice watch, hears it at once with that kind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from hosts_support import Cloud, eventually, hosts_options, read

from tpucared.launch import (
    NoticeState,
    RunState,
    notice_wait_script,
    parse_notice_wait,
)
from tpucared.ssh import sh_command

LEAD_S = 3.0  # the notice comes this long before the window: time to see the run end
START_IN_S = 4.0

# A workload that records its notice file and, on its stop signal, the notice's kind, then
# exits 0 as a training script that checkpoints on SIGTERM would.
WORKLOAD = (
    'echo "$TPUCARED_PREEMPTION_NOTICE_FILE" > "OUT/file-$TPUCARED_EMULATOR_WORKER"; '
    'trap \'cat "$TPUCARED_PREEMPTION_NOTICE_FILE"_kind > "OUT/kind-$TPUCARED_EMULATOR_WORKER";'
    " exit 0' TERM; "
    "while :; do sleep 0.05; done"
)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    timing = {"maintenance_event_lead_seconds": LEAD_S, "maintenance_duration_seconds": 0.5}
    return {**hosts_options(emulator_options, tmp_path), **timing}


async def test_a_maintenance_notice_stops_the_workload_as_a_preemption_notice_does(
    cloud: Cloud, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    await cloud.create("kept", "v4-16")  # on-demand, two workers
    targets = await cloud.targets("kept")
    await cloud.launch(targets, "~/run", WORKLOAD.replace("OUT", str(out)))
    await eventually(lambda: len(list(out.glob("file-*"))) == 2, "the workload started")
    wait = asyncio.create_task(
        cloud.run(targets[:1], sh_command(notice_wait_script("~/run", "notice", 30)))
    )
    scheduled = time.monotonic()
    window = {"start_in_seconds": START_IN_S, "duration_seconds": 0.5, "type": "SCHEDULED"}
    await cloud.control("kept", "schedule-maintenance", window)

    (result,) = await wait
    heard = time.monotonic() - scheduled - (START_IN_S - LEAD_S)  # since the notice
    answer = parse_notice_wait(result.stdout_tail)
    assert (answer.state, answer.at is not None) == (NoticeState.NOTICED, True)
    assert "kind=maintenance" in result.stdout_tail
    assert heard < 1.5, heard
    # Every worker's workload got its SIGTERM and read the kind beside its notice file.
    await eventually(lambda: len(list(out.glob("kind-*"))) == 2, "SIGTERM on every worker", 2)
    assert {(out / f"kind-{w}").read_text() for w in range(2)} == {"maintenance\n"}
    for w in range(2):
        notice = (out / f"file-{w}").read_text().strip()
        assert float(read(notice))  # the notice's format: the epoch seconds
    probes = await cloud.exited(
        targets
    )  # it exited 0, noticed, before the window (workers off) opens
    assert [(p.state, p.exit_code) for p in probes] == [(RunState.EXITED, 0)] * 2
    assert all(p.notice_at is not None for p in probes)
    assert [p.notice_kind for p in probes] == ["maintenance"] * len(probes)  # probe.sh says which
