"""The real `TpuClient` and `observe_zone` against a hostile emulator (the `malformed` fault,
emulator/hostile.py): every answer nobody should act on makes the zone's observation MALFORMED,
never empty and never an exception; a state nobody can read makes the node UNRECOGNIZED; an
endless list stops at the client's bound; a server that sends nothing fails the request
TRANSIENT at the client's read timeout, long before the server would have answered.

The faults are random with `error_rate` 1 on node GETs, so every retry meets them too. Retry
sleeps are recorded, not slept.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from gcp_fakes import EmulatorControl, Sleeps

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind, ErrorKind
from tpucared.gcp.auth import NoAuth
from tpucared.gcp.retry import RetryPolicy
from tpucared.gcp.tpu.bodies import NodeShape
from tpucared.gcp.tpu.client import MAX_LIST_PAGES, TpuClient
from tpucared.gcp.tpu.observe import NodeCache, observe_zone
from tpucared.gcp.tpu.states import NodeState
from tpucared_emulator import EmulatorServer

P = "hostile-project"
ZONE = "us-central2-b"
NODES = f"/v2/projects/{P}/locations/{ZONE}/nodes"
LABELS = {FLEET_LABEL: "sweep", OWNER_LABEL: "daemon-1"}
SIZE = 3
ATTEMPTS = RetryPolicy().max_attempts


class Control(EmulatorControl):
    async def hostile(self, mode: str, **fields: Any) -> None:
        """Every node GET from now on meets `mode`; the request log starts empty."""
        config = {"error_rate": 1.0, "kinds": ["malformed"], "mode": mode, **fields}
        await self.send("PUT", "/faults", {**config, "paths": ["/nodes"], "methods": ["GET"]})
        await self.send("DELETE", "/requests")

    async def lists(self) -> list[dict[str, Any]]:
        """The node lists the emulator answered, in order."""
        log = await self.send("GET", "/requests")
        return [r for r in log if r["method"] == "GET" and r["path"] == NODES]


@pytest.fixture
async def control(emulator: EmulatorServer) -> AsyncIterator[Control]:
    async with aiohttp.ClientSession() as session:
        yield Control(emulator.url, session)


@pytest.fixture
def client_options(sleeps: Sleeps) -> dict[str, Any]:
    return {"sleep": sleeps, "rng": lambda: 0.5}


@pytest.fixture
async def fleet(client: TpuClient) -> list[str]:
    """SIZE READY nodes with our labels, created through the client."""
    shape = NodeShape(
        accelerator_type="v4-8",
        extra={"runtime_version": "tpu-ubuntu2204-base"},
        capacity=CapacityKind.SPOT,
        labels=LABELS,
    )
    operations = [await client.create_node(P, ZONE, f"sweep-{i}", shape) for i in range(SIZE)]
    for operation in operations:
        await client.wait_operation(operation, poll_interval=0.02, timeout=30, sleep=asyncio.sleep)
    observation = await observe(client)
    assert [n.state for n in observation.nodes] == [NodeState.READY] * SIZE
    return sorted(n.name for n in observation.nodes)


async def observe(client: TpuClient, cache: NodeCache | None = None) -> ZoneObservation:
    return await observe_zone(client, P, ZONE, datetime.now(UTC), cache=cache)


def unknown(observation: ZoneObservation, kind: ErrorKind) -> bool:
    """The zone is unknown for the tick: an error, and no nodes at all (never "empty")."""
    return observation.error is kind and observation.nodes == () and not observation.ok


# Answers the client refuses, with what its message names and how many requests it made: a
# body it cannot use is MALFORMED in the request path, retried like a transient error; a page
# of the wrong shape (an error envelope sent with 200) is refused by the list, once.
REFUSED_BY_THE_CLIENT = {
    "not_json": ("not JSON", ATTEMPTS),
    "deep_json": ("nested too deep", ATTEMPTS),
    "redirect": ("redirect to http://127.0.0.2:9", ATTEMPTS),
    "error_envelope": ("unexpected fields ['error']", 1),
}


@pytest.mark.parametrize("mode", sorted(REFUSED_BY_THE_CLIENT))
async def test_an_answer_that_is_not_a_list_makes_the_zone_malformed(
    client: TpuClient, control: Control, sleeps: Sleeps, fleet: list[str], mode: str
) -> None:
    why, requests = REFUSED_BY_THE_CLIENT[mode]
    cache: NodeCache = {}
    assert (await observe(client, cache)).ok
    remembered = dict(cache)
    await control.hostile(mode)
    observation = await observe(client, cache)
    assert unknown(observation, ErrorKind.MALFORMED), observation
    assert why in (observation.error_message or "")
    assert [r["fault"] for r in await control.lists()] == ["malformed"] * requests  # bounded
    assert len(sleeps.delays) == requests - 1
    assert cache == remembered  # a failed list teaches the cache nothing


@pytest.mark.parametrize(
    ("mode", "why"),
    [("labels_list", "labels: not a map of strings"), ("duplicate", "listed twice")],
)
async def test_a_list_read_wrong_makes_the_zone_malformed(
    client: TpuClient, control: Control, fleet: list[str], mode: str, why: str
) -> None:
    await control.hostile(mode)
    observation = await observe(client)
    assert unknown(observation, ErrorKind.MALFORMED), observation
    assert why in (observation.error_message or "")
    assert [r["fault"] for r in await control.lists()] == ["malformed"]  # one list, read once


@pytest.mark.parametrize("value", ["SOMETHING_NEW", 99, True, {"x": 1}, "UNRECOGNIZED"])
async def test_a_state_nobody_can_read_is_unrecognized_with_what_was_sent(
    client: TpuClient, control: Control, fleet: list[str], value: Any
) -> None:
    await control.hostile("state", value=value)
    observation = await observe(client)
    assert observation.ok, observation
    assert sorted(n.name for n in observation.nodes) == fleet  # observed, labels and all
    for node in observation.nodes:
        assert node.state is NodeState.UNRECOGNIZED
        assert node.raw_state == repr(value)
        assert node.labels == LABELS


async def test_endless_pages_stop_at_the_clients_bound(
    client: TpuClient, control: Control, fleet: list[str]
) -> None:
    await control.hostile("endless_pages")
    started = time.monotonic()
    observation = await observe(client)
    seconds = time.monotonic() - started
    assert unknown(observation, ErrorKind.MALFORMED), observation
    assert f"did not end within {MAX_LIST_PAGES} pages" in (observation.error_message or "")
    lists = await control.lists()
    # One list, not retried as a whole: exactly the bound, each a fresh token after the first.
    assert len(lists) == MAX_LIST_PAGES, (len(lists), seconds)
    tokens = [r["query"].get("pageToken") for r in lists]
    assert tokens[0] is None
    assert len(set(tokens[1:])) == MAX_LIST_PAGES - 1
    assert all(r["fault"] == "malformed" for r in lists)
    print(f"endless_pages: {len(lists)} requests in {seconds:.2f} s")


async def test_slow_headers_fail_transient_at_the_read_timeout(
    emulator: EmulatorServer, control: Control, sleeps: Sleeps, fleet: list[str]
) -> None:
    delay, timeout = 20.0, 0.5
    await control.hostile("slow_headers", delay_s=delay)
    async with TpuClient(
        emulator.url, token_source=NoAuth(), timeout=timeout, sleep=sleeps, rng=lambda: 0.5
    ) as impatient:
        started = time.monotonic()
        observation = await observe(impatient)
        seconds = time.monotonic() - started
    assert unknown(observation, ErrorKind.TRANSIENT), observation
    # Every attempt gave up at the read timeout: well before the server would have answered.
    assert ATTEMPTS * timeout * 0.9 <= seconds < delay / 2, seconds
    assert len(sleeps.delays) == ATTEMPTS - 1

    async def all_logged() -> list[dict[str, Any]]:
        for _ in range(200):  # each stall ends once the emulator sees the client hang up
            lists = await control.lists()
            if len(lists) == ATTEMPTS:
                return lists
            await asyncio.sleep(0.02)
        return await control.lists()

    assert [r["fault"] for r in await all_logged()] == ["malformed"] * ATTEMPTS
    print(f"slow_headers: TRANSIENT after {seconds:.2f} s ({ATTEMPTS} attempts)")
