"""The participants of the capacity benchmark: the real daemon (its fleet direct or queued;
on Compute Engine spot or flex-start) or a replayed schedule, each hunting in a zone of its
own through its own stockouts, on the TPU API or on Compute Engine (bench/capacity/compute.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench import common, daemon_config, replay, replay_compute
from bench.capacity import compute
from bench.capacity.settings import POLL, Group, Settings
from bench.detection import PROJECT, ROOT, TYPE, Cloud, DaemonProcess, recorded_ready

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Replays run on an event loop of their own (one thread, one aiohttp session)


class ReplayLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="replays", daemon=True)
        self.session: Any = None

    def __enter__(self) -> ReplayLoop:
        import aiohttp

        self.thread.start()

        async def open_session() -> Any:
            return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))

        self.session = self.submit(open_session()).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.session is not None:
            self.submit(self.session.close()).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


# ---------------------------------------------------------------------------------------------
# The daemon, its fleet direct or queued


class FleetDaemon(DaemonProcess):
    """bench/detection.py's daemon, with the fleet's `provisioning` said: "queued" makes one
    spot queued resource per slot, which the cloud provisions when capacity frees; on
    Compute Engine (`api`), a fleet of VMs of the `capacity` given (compute.fleet_keys)."""

    def __init__(
        self,
        directory: Path,
        endpoint: str,
        *,
        size: int,
        zone: str,
        owner: str,
        policy: str,
        provisioning: str,
        api: str = "tpu",
        capacity: str = "spot",
    ) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "fleet.toml"
        fleet = daemon_config.fleet(
            "bench",
            zones=[zone],
            accelerator_type=TYPE,
            size=size,
            capacity="spot",
            provisioning=provisioning,
        )
        if api == "compute":
            fleet = daemon_config.laid_over(fleet, compute.fleet_keys(capacity))
        config = daemon_config.against_emulator(
            endpoint, fleet, project=PROJECT, owner=owner, poll=f"{POLL:g}s", policy=policy or None
        )
        daemon_config.write(self.config, config)
        self.log = (directory / "daemon.log").open("ab")
        self.process = common.start_daemon(self.config, self.log, cwd=ROOT)


def created_at(cloud: Cloud, zone: str) -> dict[str, float]:
    """node id -> its createTime on the emulator's clock: for a queued resource's node, the
    instant the cloud gave the request its capacity."""
    return dict(
        cloud.thread.call(
            lambda s: [(n.node_id, n.create_time) for n in s.all_nodes() if n.zone == zone]
        )
    )


# ---------------------------------------------------------------------------------------------
# One participant: its own zone, its own stockouts


@dataclass
class Participant:
    group: Group
    index: int  # within the group
    zone: str
    rng: random.Random
    samples: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.group.key}-{self.zone}"


def zone_ready(cloud: Cloud, zone: str, size: int, api: str = "tpu") -> bool:
    """Every slot up: `size` nodes READY (TPU API), or `size` VMs RUNNING (Compute Engine)."""
    if api == "compute":
        return compute.zone_running(cloud, zone, size)
    states = cloud.nodes(zone)
    return len(states) == size and all(s == "READY" for s in states.values())


def stock_out(cloud: Cloud, zone: str, api: str) -> float:
    """The zone's capacity to 0 and its slots preempted, so that every slot must hunt; the
    emulator's time of the stockout."""
    if api == "compute":
        stocked_out = compute.set_capacity(cloud, zone, 0)
        compute.preempt_running(cloud, zone)
        return stocked_out
    stocked_out = cloud.set_capacity(0, zone)
    for node, state in cloud.nodes(zone).items():
        if state == "READY":
            cloud.preempt(node, zone)
    return stocked_out


Client = replay.Replay | replay_compute.ComputeReplay


def replay_clients(p: Participant, cloud: Cloud, replays: ReplayLoop) -> list[Client]:
    """The replayed tool's slots, made (and waited for) before the first stockout."""
    g = p.group
    clients: list[Client] = []
    for slot in range(g.slots):
        name = f"{g.tool}-{slot}"
        if g.tool == "gcloud":
            vm = replay_compute.ComputeReplay(
                replays.session, cloud.url, PROJECT, p.zone, name, p.rng
            )
            replays.submit(vm.create()).result(60)
            clients.append(vm)
        else:
            node = replay.Replay(replays.session, cloud.url, PROJECT, p.zone, name, p.rng)
            replays.submit(node.create(replay.GcloudWaiter().sleeps(p.rng))).result(60)
            clients.append(node)
    return clients


def recovery(g: Group, clients: list[Client], settings: Settings) -> Coroutine[Any, Any, None]:
    """The replayed tool's recovery of every slot, from the preemption on."""
    if g.tool == "gcloud":
        vms = [c for c in clients if isinstance(c, replay_compute.ComputeReplay)]
        return replay_compute.gcloud_loop_fleet(vms, settings.tpucare)
    nodes = [c for c in clients if isinstance(c, replay.Replay)]
    if g.tool == "skypilot":
        return replay.skypilot_jobs(nodes, settings.skypilot)
    return replay.tpucare_fleet(nodes, settings.tpucare)


def run_participant(
    p: Participant,
    cloud: Cloud,
    replays: ReplayLoop,
    settings: Settings,
    scratch: Path,
    log: Callable[[str], None],
) -> None:
    g = p.group
    api = settings.api
    daemon: DaemonProcess | None = None
    clients: list[Client] = []
    try:
        if g.tool == "tpucared":
            daemon = FleetDaemon(
                scratch / p.name,
                cloud.url,
                size=g.slots,
                zone=p.zone,
                owner=f"bench{p.index}",
                policy=g.policy,
                provisioning=g.provisioning,
                api=api,
                capacity=g.capacity,
            )
            d = daemon

            def ready() -> bool:
                return zone_ready(cloud, p.zone, g.slots, api) and recorded_ready(d, g.slots)
        else:
            clients = replay_clients(p, cloud, replays)

            def ready() -> bool:
                return zone_ready(cloud, p.zone, g.slots, api)

        common.wait_until(ready, 180, f"{p.name} READY")
        time.sleep(p.rng.uniform(0, settings.stagger))
        for i in range(g.samples):
            if i:
                time.sleep(p.rng.uniform(*settings.pause))
            stocked_out = stock_out(cloud, p.zone, api)
            hunt: concurrent.futures.Future[None] | None = None
            if clients:
                hunt = replays.submit(recovery(g, clients, settings))
            time.sleep(settings.stockout)
            if api == "compute":
                restored = compute.set_capacity(cloud, p.zone, None)
            else:
                restored = cloud.set_capacity(None, p.zone)
            if hunt is not None:
                hunt.result(1200)
            common.wait_until(ready, 1200, f"{p.name} READY again")
            sample = {
                "group": g.label,
                "tool": g.tool,
                "slots": g.slots,
                "zone": p.zone,
                "api": api,
                "stocked_out": stocked_out,
                "restored": restored,
                "provisioning": g.provisioning,
                "capacity": g.capacity,
            }
            if api == "compute":
                sample["ready_nodes"] = sorted(compute.instances(cloud, p.zone))
                sample["created_at"] = compute.created_at(cloud, p.zone)
                sample["inserts"] = compute.inserts(cloud, p.zone, stocked_out)
            else:
                sample["ready_nodes"] = sorted(cloud.nodes(p.zone))
                sample["created_at"] = created_at(cloud, p.zone)
            p.samples.append(sample)
            log(f"{g.label} x{g.slots} {p.zone}: sample {i + 1}/{g.samples} done")
    except Exception as exc:  # reported in the result, and the run fails at the end
        p.error = f"{type(exc).__name__}: {exc}"
    finally:
        if daemon is not None:
            daemon.stop()
