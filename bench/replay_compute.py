"""The tight loop a user would write with gcloud against Compute Engine, replayed as a small
client against the emulator: bench/replay.py's tpucare loop with `gcloud compute instances`
instead of `gcloud compute tpus tpu-vm`, for the capacity benchmark's `--api compute`.

One slot is one spot `tpu7x-standard-4t` VM (one host) in its own zone, driven by raw aiohttp
requests to the emulator's `/compute/v1/` paths, so every request is exactly one line of its
request log. The loop's structure is tpucare's (bench/replay.py: the zone listed at most every
10 s, a synchronous delete of the lost VM, then `while ! gcloud compute instances create ...;
do echo; done`, each attempt a gcloud process taken to start in 1 s, the slots of one process
under a semaphore of 2), so that beside the TPU run only the API and its waiter differ.

gcloud's waiter on Compute Engine (google-cloud-sdk `lib/googlecloudsdk/api_lib/compute/`
`request_helper.py` `MakeRequests` and `waiters.py` `WaitForOperations`, read at
google-cloud-sdk-unofficial/google-cloud-sdk 01f043c2): after the insert, it asks
`zoneOperations.wait` for the operation (which answers when the operation is DONE, or after
the server's own limit, 2 minutes on the real API); an answer not yet DONE is followed by a
sleep of 1 s, then 2, 3, 4, 5, 5... (`sleep_sec = min(sleep_sec + 1, 5)`) and another wait; an
answer DONE is acted on at once. A DONE insert without error is followed by `instances.get`
of its VM (the "followup" that prints it); a failed one or a delete by nothing. So a failing
insert costs two requests (insert, wait), a winning one three. gcloud's other lookups (the
image family, the project's defaults) are left out, as for the TPU loop: the rates are lower
bounds.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.replay import CapacityError, TpucareSchedule, tight_loop
from tpucared.gcp.compute.bodies import boot_disk_type, default_image

MACHINE = "tpu7x-standard-4t"
# The operation errors of an insert that found no capacity (both are real, research §9 row 2).
STOCKOUTS = frozenset({"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"})


@dataclass(frozen=True)
class GcloudComputeWaiter:
    """`waiters.WaitForOperations`: the sleep after each `zoneOperations.wait` that came back
    before the operation was DONE (none after one that came back DONE)."""

    step: float = 1.0
    ceiling: float = 5.0  # _MAX_TIME_BETWEEN_POLLS_SEC

    def sleeps(self) -> Iterator[float]:
        slept = 0.0
        while True:
            slept = min(slept + self.step, self.ceiling)
            yield slept


def insert_body(name: str, zone: str) -> dict[str, Any]:
    """What `gcloud compute instances create NAME --machine-type tpu7x-standard-4t
    --provisioning-model SPOT --instance-termination-action STOP` sends (its image and boot
    disk the generation's defaults, as the daemon's)."""
    disk = boot_disk_type(MACHINE)
    params: dict[str, Any] = {"sourceImage": default_image(MACHINE)}
    if disk is not None:
        params["diskType"] = f"zones/{zone}/diskTypes/{disk}"
    return {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/{MACHINE}",
        "disks": [
            {"boot": True, "autoDelete": True, "type": "PERSISTENT", "initializeParams": params}
        ],
        "networkInterfaces": [
            {
                "network": "global/networks/default",
                "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "name": "external-nat"}],
            }
        ],
        "scheduling": {
            "provisioningModel": "SPOT",
            "instanceTerminationAction": "STOP",
            "onHostMaintenance": "TERMINATE",
            "automaticRestart": False,
        },
    }


class ComputeReplay:
    """Raw compute v1 calls for one VM, as gcloud makes them."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        endpoint: str,
        project: str,
        zone: str,
        name: str,
        rng: random.Random,
        sleep: Callable[[float], Any] = asyncio.sleep,
        waiter: GcloudComputeWaiter = GcloudComputeWaiter(),
    ) -> None:
        self.session = session
        self.zone_url = f"{endpoint}/compute/v1/projects/{project}/zones/{zone}"
        self.zone = zone
        self.name = name
        self.rng = rng
        self.sleep = sleep
        self.waiter = waiter
        self.attempts = 0

    async def _call(self, method: str, url: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
        async with self.session.request(method, url, **kwargs) as response:
            body: dict[str, Any] = await response.json(content_type=None)
            return response.status, body

    async def _json(self, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        status, body = await self._call(method, url, **kwargs)
        if status >= 400:
            raise RuntimeError(f"{method} {url}: {status} {body}")
        return body

    async def list_names(self) -> list[str]:
        body = await self._json("GET", f"{self.zone_url}/instances", params={"maxResults": "500"})
        return [str(i["name"]) for i in body.get("items", [])]

    async def wait(self, operation: dict[str, Any]) -> dict[str, Any]:
        """`WaitForOperations` for one operation: wait, and sleep only after an early answer."""
        sleeps = self.waiter.sleeps()
        while operation.get("status") != "DONE":
            url = f"{self.zone_url}/operations/{operation['name']}/wait"
            operation = await self._json("POST", url)
            if operation.get("status") != "DONE":
                await self.sleep(next(sleeps))
        return operation

    async def delete(self) -> None:
        """`gcloud compute instances delete`: the DELETE and its wait (no followup)."""
        status, body = await self._call("DELETE", f"{self.zone_url}/instances/{self.name}")
        if status == 404:
            return  # already gone
        if status >= 400:
            raise RuntimeError(f"delete {self.name}: {status} {body}")
        await self.wait(body)

    async def create(self) -> None:
        """One `gcloud compute instances create`: the insert, its wait, the followup get;
        raises CapacityError for a stockout (in the operation, or at once as HTTP 503)."""
        self.attempts += 1
        url = f"{self.zone_url}/instances"
        status, operation = await self._call("POST", url, json=insert_body(self.name, self.zone))
        if status >= 400:
            reasons = {e.get("reason") for e in (operation.get("error") or {}).get("errors", [])}
            if status == 503 and reasons & STOCKOUTS:
                raise CapacityError(str(operation))
            raise RuntimeError(f"insert {self.name}: {status} {operation}")
        done = await self.wait(operation)
        errors = (done.get("error") or {}).get("errors") or []
        if any(e.get("code") in STOCKOUTS for e in errors):
            raise CapacityError(errors[0].get("message", ""))
        if errors:
            raise RuntimeError(f"insert {self.name}: {errors}")
        await self._json("GET", f"{self.zone_url}/instances/{self.name}")


async def gcloud_loop_recover(
    replay: ComputeReplay, schedule: TpucareSchedule, creating: asyncio.Semaphore | None = None
) -> None:
    """From the preemption to an insert that found capacity, in tpucare's loop on Compute
    Engine (a stopped spot VM keeps its name until deleted); `creating` is the semaphore the
    slots of one process share around their loops."""
    await tight_loop(replay, schedule, replay.delete, replay.create, creating)


async def gcloud_loop_fleet(replays: Sequence[ComputeReplay], schedule: TpucareSchedule) -> None:
    """Every slot of one process recovering at once: two insert loops at a time."""
    creating = asyncio.Semaphore(2)
    await asyncio.gather(*(gcloud_loop_recover(r, schedule, creating) for r in replays))
