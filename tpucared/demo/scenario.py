"""The demo's story: what the cloud does to the fleet, and the calls that make it happen.

`schedule` is pure: from the fleets and a seed it yields the steps, without end, each timed
from the previous one (`after` seconds) rather than from the start, so that a slow machine
slows the story down instead of scrambling it. One cycle, with the first fleet's slot 0 as
the star (a multi-host slice in the demo):

    +12 s  a spot preemption of the star, with an 8 s notice (the workload checkpoints on
           SIGTERM; the daemon replaces the node before the API says PREEMPTED)
     +1 s  a host-maintenance window announced on a slot of another fleet, starting
           `WINDOW_IN_S` later (`on_maintenance`, by default `checkpoint`: the daemon has the
           workload checkpoint before the window, then relaunches it after; a spot node the
           window terminates is made again)
     +5 s  a stockout: no capacity in the star's first zone, for every accelerator type the
           fleets use there, for `STOCKOUT_S` seconds (restored in the background)
     +1 s  a preemption of another fleet's slot: its replacement must go to its next zone
     +3 s  the star again: with no zone left, the daemon backs off and retries until the
           capacity comes back
    +20 s  then every 10-14 s (seeded), a preemption of a random slot, four times (a slot of
           a Compute Engine fleet is a VM: preempted as its `on_preemption` says)

Most steps are gated: they wait (up to `GATE_PATIENCE_S`) until the caller's `ripe(fleet,
slot)` holds; the demo makes that "the slot's training has made a few steps since it last
(re)started", so every preemption has progress to lose and a checkpoint to resume from, and
the stockout starts once the star is back at work.

`drive` applies the steps until stopped, starting none after `quiet_after` seconds (so the
last recovery is on screen before the end); `Injector` carries them out through the
emulator's control API (/_emulator/v1), the way a test or a person with curl would. A
preemption waits for its node to be READY (a node being created cannot be preempted) and is
skipped if it does not get there in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from tpucared.config.syntax import COMPUTE_API
from tpucared.core.model.machines import MACHINE_TYPES
from tpucared.core.model.specs import DEFAULT_API, FleetSpec

STOCKOUT_S = 15.0
WINDOW_IN_S = 8.0  # a maintenance window is announced this long before it starts
WINDOW_S = 4.0
NOTICE_S = 8.0  # the star's first preemption comes with this much notice
GATE_PATIENCE_S = 30.0
READY_PATIENCE_S = 10.0
CONTROL = "/_emulator/v1"

SlotKey = tuple[str, int]


@dataclass(frozen=True)
class Preempt:
    after: float  # seconds after the previous step
    gate: SlotKey | None  # wait until ripe(gate) first (bounded)
    fleet: str
    slot: int
    node: str
    why: str
    notice: float | None = None  # the preemption notice's lead (seconds), None: no notice
    api: str = DEFAULT_API  # the fleet's cloud API: a TPU API node or a Compute Engine VM


@dataclass(frozen=True)
class Stockout:
    after: float
    gate: SlotKey | None
    zone: str
    accelerator_types: tuple[str, ...]
    seconds: float  # then the capacity is restored (no limit again)
    why: str


@dataclass(frozen=True)
class Maintenance:
    after: float
    gate: SlotKey | None
    fleet: str
    slot: int
    node: str
    start_in: float  # the window starts this long after it is announced
    seconds: float  # and lasts this long
    why: str


Step = Preempt | Stockout | Maintenance


def schedule(fleets: Sequence[FleetSpec], seed: int) -> Iterator[Step]:
    """The story's steps, forever (the driver stops taking them)."""
    live = [f for f in fleets if f.size > 0]
    if not live:
        return
    rng = random.Random(seed)
    star, others = live[0], live[1:]
    zone = star.zones[0]
    types = tuple(sorted({f.accelerator_type for f in live if zone in f.zones}))
    slots = [(f, i) for f in live for i in range(f.size)]
    while True:
        # With the notice a spot VM gets: the workload checkpoints before its VM goes.
        yield replace(
            _preempt(12, star, 0, f"a spot preemption, {NOTICE_S:g} s notice"), notice=NOTICE_S
        )
        other = others[0] if others else None
        # Drawn first, so that the window falls on another slot than the preemption below.
        hit = rng.randrange(other.size) if other else 0
        if other and other.api == DEFAULT_API:
            yield _window(1, other, (hit + 1) % other.size)
        yield Stockout(
            5 if other else 6, (star.name, 0), zone, types, STOCKOUT_S,
            f"no {'/'.join(types)} left in {zone}",
        )  # fmt: skip
        if other:
            yield _preempt(1, other, hit, _whither(other, zone))
        yield _preempt(3, star, 0, _whither(star, zone))
        after = 20.0
        for _ in range(4):
            fleet, slot = rng.choice(slots)
            yield _preempt(after, fleet, slot, "a spot preemption")
            after = rng.uniform(10, 14)


def _whither(fleet: FleetSpec, dry: str) -> str:
    """Where the replacement of a node of `fleet` goes while zone `dry` has no capacity."""
    if dry not in fleet.zones:
        return "a spot preemption"
    elsewhere = [z for z in fleet.zones if z != dry]
    if elsewhere:
        return f"no room in {dry}: its replacement must find room in {elsewhere[0]}"
    return f"no room in {dry}: its replacement must wait for capacity"


def _window(after: float, fleet: FleetSpec, slot: int) -> Maintenance:
    policy = fleet.workload.on_maintenance.value if fleet.workload else None
    how = f"on_maintenance {policy}" if policy else "no workload to checkpoint"
    why = f"host maintenance in {WINDOW_IN_S:g} s, for {WINDOW_S:g} s ({how})"
    where = (fleet.name, slot)
    return Maintenance(
        after, where, fleet.name, slot, fleet.node_name(slot), WINDOW_IN_S, WINDOW_S, why
    )


def _preempt(after: float, fleet: FleetSpec, slot: int, why: str) -> Preempt:
    where = (fleet.name, slot)
    return Preempt(after, where, fleet.name, slot, fleet.node_name(slot), why, api=fleet.api)


class Injector:
    """Carries out steps against one emulator's control API."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        endpoint: str,
        project: str,
        *,
        ready_patience: float = READY_PATIENCE_S,
    ) -> None:
        self._session = session
        self._base = endpoint.rstrip("/") + CONTROL
        self._project = project
        self._patience = ready_patience

    async def preempt(self, step: Preempt) -> str:
        """Preempt the node (or VM) once READY; returns what was done, for people."""
        if step.api == COMPUTE_API:
            return await self._preempt_vm(step)
        node = await self._ready(step.node, self._patience)
        if node is None:
            return f"skipped preempting {step.node}: not READY within {self._patience:g}s"
        zone = node["zone"]
        path = f"/projects/{self._project}/locations/{zone}/nodes/{step.node}:preempt"
        await self._call("POST", path, {"notice_seconds": step.notice} if step.notice else None)
        workers = len(node.get("workers") or ())
        return (
            f"preempt {step.node} ({node['accelerator_type']}, {workers} worker"
            f"{'s' if workers != 1 else ''}, {zone}): {step.why}"
        )

    async def maintenance(self, step: Maintenance) -> str:
        """Announce a host-maintenance window on the node once READY."""
        node = await self._ready(step.node, self._patience)
        if node is None:
            return f"skipped a maintenance window on {step.node}: not READY in {self._patience:g}s"
        zone = node["zone"]
        path = f"/projects/{self._project}/locations/{zone}/nodes/{step.node}:schedule-maintenance"
        body = {"start_in_seconds": step.start_in, "duration_seconds": step.seconds}
        await self._call("POST", path, {**body, "type": "SCHEDULED"})
        return (
            f"schedule maintenance of {step.node} ({node['accelerator_type']}, {zone}): {step.why}"
        )

    async def _preempt_vm(self, step: Preempt) -> str:
        """A Compute Engine VM's preemption: it honours the VM's termination action."""
        vm = await self._running(step.node, self._patience)
        if vm is None:
            return f"skipped preempting {step.node}: not RUNNING within {self._patience:g}s"
        zone = vm["zone"]
        path = f"/projects/{self._project}/zones/{zone}/instances/{step.node}:preempt"
        await self._call("POST", path, {"notice_seconds": step.notice} if step.notice else None)
        action = str(vm.get("termination_action") or "STOP").lower()
        return (
            f"preempt {step.node} ({vm['machine_type']} VM, {zone}, on_preemption {action}): "
            + (step.why)
        )

    async def capacity(
        self, zone: str, accelerator_types: Iterable[str], available: int | None
    ) -> None:
        for name in accelerator_types:
            kind = "machine_type" if name in MACHINE_TYPES else "accelerator_type"
            body = {"zone": zone, kind: name, "available": available}
            await self._call("PUT", "/capacity", body)

    async def _running(self, name: str, patience: float) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + patience
        while True:
            listed = await self._call("GET", "/instances")
            for vm in listed.get("instances", []):
                if (vm.get("project"), vm.get("name"), vm.get("status")) == (
                    self._project,
                    name,
                    "RUNNING",
                ):
                    return dict(vm)
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(0.5)

    async def _ready(self, name: str, patience: float) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + patience
        while True:
            listed = await self._call("GET", "/nodes")
            for node in listed.get("nodes", []):
                if (
                    node.get("project") == self._project
                    and node.get("node_id") == name
                    and node.get("state") == "READY"
                ):
                    return dict(node)
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(0.5)

    async def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        async with self._session.request(method, self._base + path, json=body) as response:
            data = await response.json(content_type=None)
            if response.status >= 400:
                message = (data or {}).get("error", {}).get("message", response.reason)
                raise RuntimeError(f"{method} {path}: {response.status} {message}")
            return dict(data or {})


Report = Callable[[float, str], None]


async def drive(
    steps: Iterable[Step],
    injector: Injector,
    stop: asyncio.Event,
    report: Report,
    *,
    ripe: Callable[[SlotKey], bool] = lambda key: True,
    quiet_after: float | None = None,
    patience: float = GATE_PATIENCE_S,
) -> None:
    """Apply the steps until `stop`, reporting each with the seconds since the start; no
    step starts after `quiet_after` seconds. Stockouts end on time whatever else waits."""
    loop = asyncio.get_running_loop()
    started = previous = loop.time()
    restores: set[asyncio.Task[None]] = set()

    async def pause(seconds: float) -> None:
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), seconds)

    async def attempt(call: Awaitable[None]) -> str | None:
        """None, or why the call failed (the emulator is going away, say)."""
        try:
            await call
        except (aiohttp.ClientError, RuntimeError) as exc:
            return f"could not inject ({exc})"
        return None

    async def restore(step: Stockout) -> None:
        await pause(step.seconds)
        if not stop.is_set():
            failed = await attempt(injector.capacity(step.zone, step.accelerator_types, None))
            report(loop.time() - started, failed or f"capacity back in {step.zone}")

    try:
        for step in steps:
            await pause(previous + step.after - loop.time())
            deadline = loop.time() + patience
            while step.gate and not stop.is_set() and not ripe(step.gate):
                if loop.time() >= deadline:
                    break
                await pause(0.5)
            if stop.is_set() or (quiet_after is not None and loop.time() - started >= quiet_after):
                break
            if isinstance(step, Stockout):
                failed = await attempt(injector.capacity(step.zone, step.accelerator_types, 0))
                line = failed or f"stockout for {step.seconds:.0f}s: {step.why}"
                restores.add(asyncio.create_task(restore(step), name="demo-restore"))
            else:
                try:
                    if isinstance(step, Maintenance):
                        line = await injector.maintenance(step)
                    else:
                        line = await injector.preempt(step)
                except (aiohttp.ClientError, RuntimeError) as exc:
                    line = f"could not inject ({exc})"
            report(loop.time() - started, line)
            previous = loop.time()
        if restores:
            await asyncio.wait(restores)  # a stockout never outlives the scenario
    finally:
        for task in restores:
            task.cancel()
        if restores:
            await asyncio.gather(*restores, return_exceptions=True)
