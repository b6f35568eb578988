"""Other tools' capacity-retry schedules, replayed as small clients against the emulator.

Used by the capacity benchmark (bench/capacity/) to put tpucared's capacity hunting side by
side with what SkyPilot and tpucare would do in the same stockout, in the same emulator and
the same run. Each replay is one slot (one node name in its own zone) driven by raw aiohttp
requests, so every request it makes is exactly one HTTP request in the emulator's log. Only
the retry *schedule* is replayed, from the tools' public source (see
/work/shared/reference/field-notes.md and the notes below); none of their code is used, and
the extra calls the real tools make around each attempt (SkyPilot's provisioner lists and
teardown, gcloud's own lookups) are left out, so their request rates here are lower bounds.

- SkyPilot managed jobs (`sky/jobs/recovery_strategy.py`, FAILOVER strategy): the controller
  notices the preemption at its next status check (every 20 s), tears the cluster down,
  then `_launch(max_retry=3)`: an attempt, and after each failure a gap from
  `common_utils.Backoff(60)`: 60 s, then the previous gap x1.6 capped at 300 s, each plus
  uniform +-40 % of itself; the jittered value is kept as the base of the next one, so the
  gaps wander and can exceed 300 s by up to 40 %. After the third failure `recover()`
  relaunches at once with a fresh `Backoff(60)` and up to 240 attempts. (The newer default
  strategy, EAGER_NEXT_REGION, first tries other regions; with one zone allowed, what is
  left is the same `Backoff(60)` loop, without FAILOVER's extra early restart.)
- tpucare (`tpucare/__init__.py`): lists each zone at most every 10 s (`CACHE_TIME`), sees the
  node PREEMPTED, deletes it synchronously, then `while ! gcloud ... tpu-vm create ...; do
  echo; done`: a tight loop, each attempt one gcloud process that starts (taken as 1 s),
  POSTs the create and waits for the operation with gcloud's `waiter.WaitFor` defaults (first
  poll after 1 s, then 2 s x1.4^k plus up to 1 s of jitter). That whole loop runs under a
  semaphore of 2 shared by every slot (`start_multiple`): with more slots hunting, only two
  of them retry and the others wait for one of those to win.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

TYPE = "v4-8"
RUNTIME = "tpu-ubuntu2204-base"


# ---------------------------------------------------------------------------------------------
# Schedules (pure: a random.Random in, seconds out)


@dataclass(frozen=True)
class SkyPilotSchedule:
    """SkyPilot's relaunch backoff. `scale` shrinks every duration (quick mode only)."""

    initial: float = 60.0
    multiplier: float = 1.6
    jitter: float = 0.4
    max_factor: float = 5.0  # cap = 5 x initial = 300 s, applied before the jitter
    first_round: int = 3  # FAILOVER: _launch(max_retry=3) in the same region first
    status_check: float = 20.0  # the controller's job-status check interval
    scale: float = 1.0

    def backoff(self, rng: random.Random) -> Iterator[float]:
        """`common_utils.Backoff(initial).current_backoff()`, called again and again."""
        cap = self.max_factor * self.initial
        value: float | None = None
        while True:
            value = min(self.initial, cap) if value is None else min(value * self.multiplier, cap)
            value += rng.uniform(-self.jitter * value, self.jitter * value)
            yield value * self.scale

    def gaps(self, rng: random.Random) -> Iterator[float]:
        """The wait before each attempt after the first: FAILOVER's two rounds of backoff."""
        first = self.backoff(rng)
        for _ in range(self.first_round - 1):
            yield next(first)
        yield 0.0  # _launch gave up after 3 attempts: recover() relaunches at once
        yield from self.backoff(rng)

    def detection(self, rng: random.Random) -> float:
        return rng.uniform(0.0, self.status_check) * self.scale


@dataclass(frozen=True)
class GcloudWaiter:
    """gcloud's `waiter.WaitFor` defaults: the sleeps between operation polls."""

    pre_start: float = 1.0
    sleep: float = 2.0
    multiplier: float = 1.4
    jitter: float = 1.0
    ceiling: float = 180.0

    def sleeps(self, rng: random.Random) -> Iterator[float]:
        yield self.pre_start
        k = 0
        while True:
            yield min(self.sleep * self.multiplier**k, self.ceiling) + rng.uniform(0, self.jitter)
            k += 1


@dataclass(frozen=True)
class TpucareSchedule:
    """tpucare's tight loop: no wait between attempts beyond gcloud's own start-up."""

    list_cache: float = 10.0  # CACHE_TIME: how stale the zone's node list may be
    gcloud_start: float = 1.0  # a gcloud process starting, before its first request
    waiter: GcloudWaiter = GcloudWaiter()

    def detection(self, rng: random.Random) -> float:
        return rng.uniform(0.0, self.list_cache)


# ---------------------------------------------------------------------------------------------
# The client: one slot, one zone


class CapacityError(Exception):
    """The create's operation ended with code 8 (no capacity)."""


class Replay:
    """Raw TPU v2 calls for one node, counted as they go."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        endpoint: str,
        project: str,
        zone: str,
        node: str,
        rng: random.Random,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self.session = session
        self.parent = f"{endpoint}/v2/projects/{project}/locations/{zone}"
        self.endpoint = endpoint
        self.node = node
        self.rng = rng
        self.sleep = sleep
        self.attempts = 0

    async def _json(self, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        async with self.session.request(method, url, **kwargs) as response:
            body: dict[str, Any] = await response.json(content_type=None)
            if response.status >= 400 and response.status != 404:
                raise RuntimeError(f"{method} {url}: {response.status} {body}")
            return body

    async def list_names(self) -> list[str]:
        body = await self._json("GET", f"{self.parent}/nodes", params={"pageSize": "1000"})
        return [n["name"].rsplit("/", 1)[1] for n in body.get("nodes", [])]

    async def wait(self, operation: dict[str, Any], sleeps: Iterator[float]) -> dict[str, Any]:
        while not operation.get("done"):
            await self.sleep(next(sleeps))
            operation = await self._json("GET", f"{self.endpoint}/v2/{operation['name']}")
        return operation

    async def delete(self, sleeps: Iterator[float]) -> None:
        body = await self._json("DELETE", f"{self.parent}/nodes/{self.node}")
        if "error" in body and "name" not in body:
            return  # 404: already gone
        await self.wait(body, sleeps)

    async def create(self, sleeps: Iterator[float]) -> None:
        """One attempt: POST the create and wait for its operation; raises CapacityError."""
        self.attempts += 1
        body = {
            "acceleratorType": TYPE,
            "runtimeVersion": RUNTIME,
            "schedulingConfig": {"spot": True},
            "networkConfig": {"enableExternalIps": True},
        }
        operation = await self._json(
            "POST", f"{self.parent}/nodes", params={"nodeId": self.node}, json=body
        )
        done = await self.wait(operation, sleeps)
        error = done.get("error")
        if error and error.get("code") == 8:
            raise CapacityError(error.get("message", ""))
        if error:
            raise RuntimeError(f"create {self.node}: {error}")


async def skypilot_recover(replay: Replay, schedule: SkyPilotSchedule) -> None:
    """From the preemption to a create that found capacity, on SkyPilot's schedule."""
    waiter = GcloudWaiter()
    await replay.sleep(schedule.detection(replay.rng))
    await replay.delete(waiter.sleeps(replay.rng))
    gaps = schedule.gaps(replay.rng)
    while True:
        try:
            await replay.create(waiter.sleeps(replay.rng))
            return
        except CapacityError:
            await replay.sleep(next(gaps))


async def tpucare_recover(
    replay: Replay, schedule: TpucareSchedule, creating: asyncio.Semaphore | None = None
) -> None:
    """From the preemption to a create that found capacity, in tpucare's loop; `creating`
    is the semaphore the slots of one tpucare process share around their create loops."""
    await tight_loop(
        replay,
        schedule,
        lambda: replay.delete(schedule.waiter.sleeps(replay.rng)),
        lambda: replay.create(schedule.waiter.sleeps(replay.rng)),
        creating,
    )


class LoopClient(Protocol):
    """What tpucare's loop needs of a replayed client, whatever its API."""

    rng: random.Random
    sleep: Callable[[float], Any]

    async def list_names(self) -> list[str]: ...


async def tight_loop(
    replay: LoopClient,
    schedule: TpucareSchedule,
    delete: Callable[[], Awaitable[None]],
    create: Callable[[], Awaitable[None]],
    creating: asyncio.Semaphore | None = None,
) -> None:
    """tpucare's recovery of one slot, whatever the API (`delete`, `create`: one synchronous
    gcloud call each, `create` raising CapacityError on a stockout)."""
    await replay.sleep(schedule.detection(replay.rng))
    await replay.list_names()  # the refreshed list that shows the node preempted
    await replay.sleep(schedule.gcloud_start)
    await delete()
    await replay.list_names()  # `while host in tpu_names(...)`: gone
    async with creating or contextlib.nullcontext():
        while True:
            await replay.sleep(schedule.gcloud_start)
            try:
                await create()
                return
            except CapacityError:
                continue  # `do echo; done`


async def tpucare_fleet(replays: Sequence[Replay], schedule: TpucareSchedule) -> None:
    """Every slot of one tpucare process recovering at once: two creates loops at a time."""
    creating = asyncio.Semaphore(2)
    await asyncio.gather(*(tpucare_recover(r, schedule, creating) for r in replays))


async def skypilot_jobs(replays: Sequence[Replay], schedule: SkyPilotSchedule) -> None:
    """SkyPilot runs one controller per managed job: slots recover independently."""
    await asyncio.gather(*(skypilot_recover(r, schedule) for r in replays))
