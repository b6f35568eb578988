"""The launch rules of core/workload/launch_gate.py with the real runner on the emulator's SSH
hosts: when the plan and the daemon disagree (the environment changed between the plan and its
execution; a launch's own cleanup leaves a worker unclean) the executor refuses the launch and
says so in a `workload.launch_refused` event; the next plan knows, and says why in its hold,
notice or launch."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from workload_harness import (
    OWNER,
    Harness,
    Make,
    alive,
    apply_node_actions,
    eventually,
    kinds,
    ssh_emulator,
    workload,
)

from tpucared.core.planning.tick import plan_tick
from tpucared.core.vocab.actions import Notice
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.core.workload.actions import FinishAttempt, LaunchWorkload
from tpucared.ports.launcher import CleanupResult, HealthCheck, Launcher, Place, Reply, Run
from tpucared.runtime.workload.launchers import ssh_launcher
from tpucared.runtime.workload.runner import WorkloadRunner

pytestmark = pytest.mark.timeout(60)

RUN = 'echo "$TPUCARED_ATTEMPT" >> "$HOME/attempts"; exec sleep 300'


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**emulator_options, **ssh_emulator(tmp_path)}


async def plan_only(h: Harness) -> Plan:
    """A tick's plan, its node actions applied, its workload actions not carried out."""
    now = datetime.now(UTC)
    observations = await h.observe(now)
    snapshot = await h.store.load_snapshot()
    probes = await h.runner.probe(snapshot, now)
    plan = plan_tick(h.specs, observations, snapshot, probes, now, Policy(), OWNER,
                     reported=h.reported, workload_policy=h.policy)  # fmt: skip
    h.reported = plan.standing
    node_plan, _ = WorkloadRunner.split(plan)
    await apply_node_actions(h.store, h.client, node_plan.actions, now)
    return plan


async def refusals(h: Harness) -> list[str]:
    async with h.store.read() as r:
        events = await r.events(limit=1000)
    return [e.message for e in events if e.kind == "workload.launch_refused"]


async def test_a_launch_without_its_secret_is_refused_and_the_next_plan_holds(make: Make) -> None:
    environ = {"TEST_API_TOKEN": "s3cret"}
    h = await make(workload(RUN, secrets={"API_TOKEN": "TEST_API_TOKEN"}), environ=environ)
    await h.create_node()
    for _ in range(100):
        plan = await plan_only(h)
        if plan.of(LaunchWorkload):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("no launch planned")
    environ.clear()  # the daemon's environment lost the variable after the plan
    await h.runner.execute_all(WorkloadRunner.split(plan)[1], now=plan.now)
    assert await h.attempts() == []  # never launched without its secret
    (refused,) = await refusals(h)
    assert "attempt 1 not launched: the daemon's environment lacks TEST_API_TOKEN" in refused
    # The next plan knows (the probe says which variables are there): a hold and a notice.
    plan = await h.tick()
    assert kinds(plan) == ["notice"]
    (notice,) = plan.of(Notice)
    assert notice.key == "workload-blocked/sweep/0"
    assert [h.reason for h in plan.holds] == [
        "cannot launch: the daemon's environment lacks TEST_API_TOKEN (workload.secrets)"
    ]
    assert len(await refusals(h)) == 1  # nothing launched, nothing refused again
    environ["TEST_API_TOKEN"] = "s3cret"  # back: the next plan launches
    await h.tick_until(lambda p: bool(p.of(LaunchWorkload)), "the launch")
    assert [a.number for a in await h.attempts()] == [1]


class _Unreached:
    """The harness's SSH launcher, but worker 2 does not answer cleanups while `on`."""

    def __init__(self, inner: Launcher) -> None:
        self._inner = inner
        self.on = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def cleanup(
        self, place: Place, run: Run | None, health: HealthCheck | None = None
    ) -> list[Reply[CleanupResult]]:
        replies = await self._inner.cleanup(place, run, health)
        if not self.on:
            return replies
        return [Reply(r.worker, why="timeout") if r.worker == 2 else r for r in replies]


async def test_a_launch_after_an_unclean_cleanup_is_refused_and_cleaned_again(
    make: Make,
) -> None:
    h = await make(workload(RUN))
    launcher = _Unreached(ssh_launcher(h.store, h.ssh, h.key))
    await h.runner.close()
    h.runner = WorkloadRunner(h.store, h.specs, launcher, environ={})  # type: ignore[arg-type]
    await h.create_node()
    await h.tick_until(lambda p: bool(p.of(LaunchWorkload)), "attempt 1")
    await eventually(lambda: all(h.read(i, "attempts") == "1\n" for i in range(4)), "it runs")
    run_id = (await h.slot()).run_id
    pids = [h.pid(i, run_id, 1) for i in range(4)]
    launcher.on = True
    os.killpg(pids[0], signal.SIGKILL)  # attempt 1 fails; its stop misses worker 2
    await h.tick_until(lambda p: bool(p.of(FinishAttempt)), "attempt 1 ends")
    # The relaunch cleans up again first and says why; its cleanup misses worker 2 again:
    # refused, never started beside what may be left of attempt 1.
    plan = await h.tick_until(lambda p: bool(p.of(LaunchWorkload)), "the relaunch")
    (launch,) = plan.of(LaunchWorkload)
    assert (launch.attempt, launch.clean_after) == (2, 1)
    assert "the cleanup of attempt 1 left worker(s) 2 unclean (2: not cleaned: timeout)" in (
        launch.reason
    )
    assert "cleaning up again first" in launch.reason
    assert [a.number for a in await h.attempts()] == [1]
    refused = await refusals(h)
    assert refused
    assert "attempt 2 not launched: the cleanup of attempt 1 left worker(s) 2" in refused[-1]
    launcher.on = False  # worker 2 answers again: the next launch cleans up and starts
    await h.tick_until(lambda p: bool(p.of(LaunchWorkload)), "the relaunch")
    await eventually(lambda: all(h.read(i, "attempts") == "1\n2\n" for i in range(4)), "2 runs")
    assert not any(alive(p) for p in pids)
    assert [a.number for a in await h.attempts()] == [1, 2]
