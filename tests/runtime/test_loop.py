"""The loop's timing and the daemon's task plumbing, on a manual clock: ticks come at the poll,
at the instant a hold lifts (not at the next poll), or at once when woken, with bursts of
wakes coalesced; root tasks are supervised; background calls are drained with a deadline;
signals have two stages."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from tpucared.runtime.clock import ManualClock
from tpucared.runtime.loop import HOLD_SLACK_S, URGENT_GAP_S, ReconcileLoop
from tpucared.runtime.signals import TwoStageSignals
from tpucared.runtime.tasks import RootTaskDied, TaskSet, supervise
from tpucared.runtime.wakeup import STOP, TIMEOUT, WOKEN, Wakeup


async def settle() -> None:
    """Let every task that can run, run."""
    for _ in range(50):
        await asyncio.sleep(0)


@dataclass
class FakeTick:
    next_hold_lifts: datetime | None


class FakeReconciler:
    """Records when it ticked and why; each tick may report when its next hold lifts."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.ticks: list[tuple[float, str]] = []
        self.quiet: list[bool | None] = []  # what the loop said of each tick's wakes
        self.hold_in: float | None = None  # seconds from the tick to the next hold lifting

    async def tick(self, reason: str = "poll", *, quiet: bool | None = None) -> FakeTick:
        self.ticks.append((self.clock.monotonic(), reason))
        self.quiet.append(quiet)
        lifts = None
        if self.hold_in is not None:
            lifts = self.clock.now() + timedelta(seconds=self.hold_in)
        return FakeTick(lifts)


async def start_loop(
    poll: float = 10.0, min_gap: float = 0.0
) -> tuple[ManualClock, FakeReconciler, Wakeup, asyncio.Event, asyncio.Task[None]]:
    clock = ManualClock()
    reconciler = FakeReconciler(clock)
    wakeup = Wakeup()
    stop = asyncio.Event()
    loop = ReconcileLoop(reconciler, clock, wakeup, poll, min_gap=min_gap)  # type: ignore[arg-type]
    task = asyncio.create_task(loop.run(stop))
    await settle()
    return clock, reconciler, wakeup, stop, task


async def stop_loop(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    stop.set()
    await asyncio.wait_for(task, 1)


async def test_ticks_come_at_the_poll_interval() -> None:
    clock, rec, _, stop, task = await start_loop(poll=10.0)
    for _ in range(25):
        await clock.advance(1.0)
        await settle()
    assert rec.ticks == [(0.0, "start"), (10.0, "poll"), (20.0, "poll")]
    await stop_loop(stop, task)


async def test_a_hold_that_lifts_before_the_poll_brings_the_tick_forward() -> None:
    clock, rec, _, stop, task = await start_loop(poll=10.0)
    rec.hold_in = 3.0  # every tick from now on reports a backoff ending 3 s later
    await clock.advance(10.0)  # the poll tick, which reports the hold
    await settle()
    await clock.advance(2.99)
    await settle()
    assert [t for t, _ in rec.ticks] == [0.0, 10.0]
    await clock.advance(HOLD_SLACK_S + 0.02)
    await settle()
    assert [round(t, 2) for t, _ in rec.ticks] == [0.0, 10.0, 13.03]
    assert rec.ticks[-1][1] == "backoff over"
    assert rec.quiet == [False, False, True]  # a backoff's end brings nothing to list
    await stop_loop(stop, task)


async def test_a_tick_is_quiet_only_when_every_wake_was() -> None:
    clock, rec, wakeup, stop, task = await start_loop(poll=10.0, min_gap=0.5)
    await clock.advance(1.0)
    wakeup.set("create operation of sweep-0 finished", quiet=True)
    await settle()
    assert rec.quiet[-1] is True
    wakeup.set("create operation of sweep-1 finished", quiet=True)
    wakeup.set("create operation of sweep-2 finished")  # a node came of it: list
    await clock.advance(0.5)
    await settle()
    assert rec.quiet[-1] is False
    await clock.advance(10.0)  # the poll always lists
    await settle()
    assert (rec.ticks[-1][1], rec.quiet[-1]) == ("poll", False)
    await stop_loop(stop, task)


async def test_wakes_tick_at_once_and_bursts_are_coalesced() -> None:
    clock, rec, wakeup, stop, task = await start_loop(poll=10.0, min_gap=0.5)
    await clock.advance(2.0)
    wakeup.set("create operation of sweep-0 finished")
    await settle()
    assert rec.ticks[-1] == (2.0, "create operation of sweep-0 finished")
    # A burst: three wakes within the minimum gap make one tick, after the gap.
    for node in ("sweep-1", "sweep-2", "sweep-1"):
        wakeup.set(f"delete operation of {node} finished")
        await settle()
    assert len(rec.ticks) == 2
    await clock.advance(0.5)
    await settle()
    assert rec.ticks[-1] == (
        2.5,
        "delete operation of sweep-1 finished, delete operation of sweep-2 finished",
    )
    assert len(rec.ticks) == 3
    await stop_loop(stop, task)


async def test_an_urgent_wake_skips_most_of_the_gap() -> None:
    """A fresh node's first probe (a launch waits for it) is planned URGENT_GAP_S after the
    previous tick, not a whole minimum gap later."""
    clock, rec, wakeup, stop, task = await start_loop(poll=10.0, min_gap=1.0)
    await clock.advance(2.0)
    wakeup.set("create operation of sweep-0 finished")
    await settle()
    assert rec.ticks[-1] == (2.0, "create operation of sweep-0 finished")
    await clock.advance(0.04)
    wakeup.set("probe of sweep/0", urgent=True)
    await settle()
    await clock.advance(URGENT_GAP_S - 0.05)  # 2.09
    await settle()
    assert len(rec.ticks) == 2  # waits out the urgent gap...
    await clock.advance(0.02)  # 2.11
    await settle()
    assert len(rec.ticks) == 3  # ...not the whole second
    assert rec.ticks[-1][0] == pytest.approx(2.11)
    assert rec.ticks[-1][1] == "probe of sweep/0"
    assert not wakeup.urgent  # taken with its reason
    # An ordinary wake right after still waits out the whole gap.
    wakeup.set("probe of sweep/1")
    await settle()
    await clock.advance(0.5)
    await settle()
    assert len(rec.ticks) == 3
    await clock.advance(0.55)  # 3.16: past a second after the urgent tick
    await settle()
    assert rec.ticks[-1][0] == pytest.approx(3.16)
    assert rec.ticks[-1][1] == "probe of sweep/1"
    await stop_loop(stop, task)


async def test_stop_ends_the_loop_while_it_waits() -> None:
    _, rec, _, stop, task = await start_loop()
    stop.set()
    await asyncio.wait_for(task, 1)
    assert len(rec.ticks) == 1


async def test_wakeup_wait_reports_why_it_returned() -> None:
    clock = ManualClock()
    wakeup = Wakeup()
    stop = asyncio.Event()
    waiter = asyncio.create_task(wakeup.wait(clock, 5.0, stop))
    await settle()
    await clock.advance(5.0)
    assert await waiter == TIMEOUT
    wakeup.set("a")  # set while nobody waits: kept for the next wait
    wakeup.set("b")
    wakeup.set("a")
    assert await wakeup.wait(clock, 5.0, stop) == WOKEN
    assert wakeup.take() == "a, b"
    assert not wakeup.pending
    stop.set()
    assert await wakeup.wait(clock, 5.0, stop) == STOP


# ---------------------------------------------------------------------------------------------
# Supervision


async def test_a_root_task_that_dies_stops_the_others() -> None:
    clock = ManualClock()
    stop = asyncio.Event()
    ended: list[str] = []

    async def steady() -> None:
        await stop.wait()
        ended.append("steady")

    async def broken() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    with pytest.raises(ExceptionGroup) as info:
        await asyncio.wait_for(supervise({"a": steady, "b": broken}, stop, clock), 1)
    assert stop.is_set()
    assert [type(e) for e in info.value.exceptions] == [RuntimeError]


async def test_a_root_task_that_returns_on_its_own_counts_as_dead() -> None:
    clock = ManualClock()
    stop = asyncio.Event()

    async def quitter() -> None:
        return None

    async def steady() -> None:
        await stop.wait()

    with pytest.raises(ExceptionGroup) as info:
        await asyncio.wait_for(supervise({"q": quitter, "s": steady}, stop, clock), 1)
    assert isinstance(info.value.exceptions[0], RootTaskDied)


async def test_a_hung_root_task_is_cancelled_after_the_grace() -> None:
    clock = ManualClock()
    stop = asyncio.Event()

    async def deaf() -> None:
        await asyncio.Event().wait()  # ignores stop

    runner = asyncio.create_task(supervise({"deaf": deaf}, stop, clock, grace=30.0))
    await settle()
    stop.set()
    await settle()
    await clock.advance(29.0)
    assert not runner.done()
    await clock.advance(1.0)
    await asyncio.wait_for(runner, 1)


async def test_background_calls_are_drained_with_a_deadline() -> None:
    clock = ManualClock()
    failures: list[BaseException] = []
    tasks = TaskSet(failures.append)
    quick_done = asyncio.Event()

    async def quick() -> None:
        await asyncio.sleep(0)
        quick_done.set()

    async def stuck() -> None:
        await asyncio.Event().wait()

    async def broken() -> None:
        raise ValueError("bug")

    tasks.spawn(quick(), "quick")
    tasks.spawn(stuck(), "stuck")
    tasks.spawn(broken(), "broken")
    drain = asyncio.create_task(tasks.drain(clock, 30.0))
    await settle()
    assert quick_done.is_set()
    assert [type(f) for f in failures] == [ValueError]
    assert not drain.done()
    await clock.advance(30.0)
    assert await asyncio.wait_for(drain, 1) == 1  # the stuck one was cancelled
    assert len(tasks) == 0


# ---------------------------------------------------------------------------------------------
# Signals


async def test_the_first_signal_stops_the_second_exits_now() -> None:
    stop = asyncio.Event()
    exits: list[Any] = []
    signals = TwoStageSignals(stop, exit_now=exits.append)
    signals.handle(signal.SIGTERM)
    assert stop.is_set()
    assert exits == []
    signals.handle(signal.SIGINT)
    assert exits == [128 + signal.SIGINT]
