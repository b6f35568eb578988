"""A slot's background job that fails unexpectedly is contained to its slot
(runtime/workload/failures.py): logged once, recorded as `workload.job_failed` (which `status`
shows until the streak ends), held back for the core backoff, then retried, and it succeeds
once the fault is gone; the daemon keeps ticking and the other slot keeps working.

The daemon's parts run in this process against the emulator's SSH worker hosts (real OpenSSH
sshd on loopback). The fault is injected at one seam each: `WorkloadExecutor._launch` raises
once for slot 1, as a bug in the launch path would, before it records or starts anything; and
`WorkloadRunner.probe_slot` raises once, as a bug on the probing side would.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from runtime_support import hosts_emulator_options, query
from test_workload_jobs import FLEET, InProcess, eventually, inprocess

from tpucared.core.workload.actions import LaunchWorkload
from tpucared.core.workload.job_failures import JOB_RETRY
from tpucared.inspect.status import status_document, status_lines
from tpucared.runtime.workload.executor import WorkloadExecutor
from tpucared.runtime.workload.runner import WorkloadRunner
from tpucared_emulator import EmulatorServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(emulator_options, tmp_path)


def _events(h: InProcess, kind: str) -> list[dict[str, Any]]:
    return [dict(r) for r in query(h.db, "SELECT * FROM events WHERE kind = ? ORDER BY id", kind)]


async def test_a_failing_launch_is_contained_to_its_slot_and_retried_after_a_backoff(
    tmp_path: Path, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = WorkloadExecutor._launch
    raised: list[float] = []

    async def launch_failing_once_on_slot_1(
        self: WorkloadExecutor, a: LaunchWorkload, now: datetime
    ) -> None:
        if a.slot == 1 and not raised:
            raised.append(time.monotonic())
            raise RuntimeError("injected: a bug in the launch path")
        await real(self, a, now)

    monkeypatch.setattr(WorkloadExecutor, "_launch", launch_failing_once_on_slot_1)
    async with inprocess(tmp_path, emulator, size=2, kind="v4-8") as h:
        with structlog.testing.capture_logs() as logs:
            loop = asyncio.create_task(h.daemon.loop.run(h.daemon.stop))
            await eventually(lambda: bool(_events(h, "workload.job_failed")), "the failure")
            failed_at = raised[0]

            # Recorded once, with what a person needs; the daemon did not stop.
            [event] = _events(h, "workload.job_failed")
            assert (event["fleet"], event["slot"]) == (FLEET, 1)
            assert "workload job launch failed once: RuntimeError: injected" in event["message"]
            assert not h.daemon.stop.is_set()
            assert h.daemon.failures == []

            # `status` shows it while the slot waits out its backoff.
            fleets = await h.store.status()
            lines = status_lines(fleets, datetime.now(UTC))
            assert any(
                line.startswith(f"slot {FLEET}/1: workload job launch failed once, last ")
                and "RuntimeError: injected: a bug in the launch path" in line
                for line in lines
            ), lines
            doc = status_document(fleets, datetime.now(UTC))
            failure = doc["fleets"][0]["slots"][1]["job_failure"]
            assert failure["job"] == "launch"
            assert failure["failures"] == 1
            assert failure["error"] == "RuntimeError: injected: a bug in the launch path"
            assert doc["fleets"][0]["slots"][0]["job_failure"] is None

            # Retried after the backoff (at least its low end), and it works this time.
            await eventually(lambda: h.attempts_on(1, 0) == [1], "slot 1 launched", 30)
            assert time.monotonic() - failed_at >= JOB_RETRY.shortest(1)
            await eventually(
                lambda: bool(_events(h, "workload.job_recovered")), "the recovery recorded"
            )
            [recovered] = _events(h, "workload.job_recovered")
            assert (recovered["fleet"], recovered["slot"]) == (FLEET, 1)
            fleets = await h.store.status()
            now = datetime.now(UTC)
            assert not any("workload job" in line for line in status_lines(fleets, now))
            slots = status_document(fleets, now)["fleets"][0]["slots"]
            assert [s["job_failure"] for s in slots] == [None, None]

            # Meanwhile slot 0 launched and kept being probed, and the loop kept ticking.
            # (Slot 1's launch needs a fresh probe, and the slot started none during the
            # backoff: the launch came only after it, as asserted above.)
            assert h.attempts_on(0, 0) == [1]
            assert any(t.workloads.fed for t in h.ticks if t.workloads is not None)
            assert h.attempts(0) == [(1, None)]
            assert h.attempts(1) == [(1, None)]
            assert not h.daemon.stop.is_set()
            assert h.daemon.failures == []
            h.daemon.stop.set()
            await loop

        # Logged once (with the traceback), never as the TaskSet's "task.background_failed".
        failed = [e for e in logs if e["event"] == "workload.job_failed"]
        assert len(failed) == 1, failed
        assert (failed[0]["fleet"], failed[0]["slot"], failed[0]["job"]) == (FLEET, 1, "launch")
        assert failed[0]["exc_info"] is not None
        assert not [e for e in logs if e["event"] == "task.background_failed"]


async def test_a_streak_the_last_run_left_is_ended_by_the_next_success(
    tmp_path: Path, emulator: EmulatorServer
) -> None:
    """A daemon stopped while a slot's jobs were failing: the next one restores the streak, so
    the slot's first good job records its end and `status` stops showing it."""
    async with inprocess(tmp_path, emulator, kind="v4-8") as h:
        await h.tick_until(lambda t: bool(query(h.db, "SELECT 1 FROM slots")), "the slot")
        async with h.store.write() as tx:
            await tx.append_event("workload.job_failed", "left by the last run",
                                  datetime.now(UTC), fleet=FLEET, slot=0,
                                  details={"job": "probe", "error": "OSError: x",
                                           "failures": 3})  # fmt: skip
        await h.jobs.restore()
        assert (FLEET, 0) in h.jobs.failures
        assert not h.jobs.failures.held_back((FLEET, 0))  # a restart is a fresh start
        loop = asyncio.create_task(h.daemon.loop.run(h.daemon.stop))
        await eventually(lambda: h.attempts_on(0, 0) == [1], "attempt 1 runs", 30)
        await eventually(lambda: bool(_events(h, "workload.job_recovered")), "the end recorded")
        assert (FLEET, 0) not in h.jobs.failures
        fleets = await h.store.status()
        assert all(s.job_failure is None for f in fleets for s in f.slots)
        h.daemon.stop.set()
        await loop


async def test_a_failing_probe_is_contained_and_retried(
    tmp_path: Path, emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other kind of job: the first probe of the node raises (a bug in the probing side);
    the slot is probed again after the backoff, then launched, and the daemon never stopped."""
    real = WorkloadRunner.probe_slot
    raised: list[float] = []

    async def probe_failing_once(self: WorkloadRunner, job: Any, **kw: Any) -> Any:
        if not raised:
            raised.append(time.monotonic())
            raise OSError("injected: the probe's bookkeeping broke")
        return await real(self, job, **kw)

    monkeypatch.setattr(WorkloadRunner, "probe_slot", probe_failing_once)
    async with inprocess(tmp_path, emulator, kind="v4-8") as h:
        loop = asyncio.create_task(h.daemon.loop.run(h.daemon.stop))
        await eventually(lambda: bool(_events(h, "workload.job_failed")), "the failure")
        [event] = _events(h, "workload.job_failed")
        assert "workload job probe failed once: OSError: injected" in event["message"]
        await eventually(lambda: h.attempts_on(0, 0) == [1], "attempt 1 runs", 30)
        assert time.monotonic() - raised[0] >= JOB_RETRY.shortest(1)
        await eventually(lambda: bool(_events(h, "workload.job_recovered")), "the recovery")
        assert not h.daemon.stop.is_set()
        assert h.daemon.failures == []
        h.daemon.stop.set()
        await loop
