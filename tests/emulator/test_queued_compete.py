"""How waiting queued resources and plain creates compete for capacity that frees, under
both of the emulator's models (`EmulatorOptions.queued_serve`, queued.py): "at-once" (the
queue takes freed capacity first, the instant it frees) and "scan" (the queue is looked at
every `queued_scan_seconds`; a plain create may take the capacity between scans).

Over HTTP on loopback, with the emulator on a manual clock: every request fires what is due
first, so each instant below is exact and nothing sleeps. Google documents neither model
(tpu/docs/queued-resources says only that a request waits "until there are sufficient free
resources"): the daemon must do well under both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from emulator_http import Http

from tpucared_emulator import EmulatorOptions, running_emulator
from tpucared_emulator.clock import ManualClock
from tpucared_emulator.server import build_parser

P, Z, T = "qc", "us-central2-b", "v4-8"
PARENT = f"projects/{P}/locations/{Z}"
QRS = f"/v2/{PARENT}/queuedResources"
NODES = f"/v2/{PARENT}/nodes"
NODE = {"acceleratorType": T, "runtimeVersion": "tpu-vm-base", "schedulingConfig": {"spot": True}}
START = 1_800_000_000.0  # a multiple of the scan period: scans at START + 10, + 20, ...
SCAN = 10.0


def queued_body(node_id: str) -> dict[str, Any]:
    node = {"acceleratorType": T, "runtimeVersion": "tpu-vm-base"}
    return {"tpu": {"nodeSpec": [{"parent": PARENT, "nodeId": node_id, "node": node}]}, "spot": {}}


@asynccontextmanager
async def cloud(
    session: aiohttp.ClientSession, serve: str, judged: str = "post"
) -> AsyncIterator[tuple[Http, ManualClock]]:
    clock = ManualClock(start=START)
    async with running_emulator(
        clock=clock,
        queued_serve=serve,
        queued_scan_seconds=SCAN,
        capacity_judged=judged,
        create_seconds=2.0,
        delete_seconds=1.0,
        queued_provision_seconds=1.0,
    ) as server:
        yield Http(server.url, session), clock


async def set_capacity(http: Http, available: int | None) -> None:
    body = {"zone": Z, "accelerator_type": T, "available": available}
    await http.ok("PUT", "/_emulator/v1/capacity", body)


async def qr_state(http: Http, qr_id: str = "q") -> str:
    state: str = (await http.ok("GET", f"{QRS}/{qr_id}"))["state"]["state"]
    return state


async def op_of(http: Http, op: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = await http.ok("GET", f"/v2/{op['name']}")
    return out


async def waiting_queued_resource(http: Http, clock: ManualClock) -> None:
    """A stockout, and a queued resource "q" waiting for slice-q past its least wait."""
    await set_capacity(http, 0)
    await http.ok("POST", QRS, queued_body("slice-q"), queuedResourceId="q")
    clock.advance(1.5)
    assert await qr_state(http) == "WAITING_FOR_RESOURCES"


@pytest.mark.parametrize("judged", ["post", "end"])
async def test_at_once_the_queue_takes_freed_capacity_before_a_plain_create(
    session: aiohttp.ClientSession, judged: str
) -> None:
    async with cloud(session, "at-once", judged) as (http, clock):
        await waiting_queued_resource(http, clock)
        if judged == "end":  # a create in flight when capacity comes back, ending after it
            op = await http.ok("POST", NODES, NODE, nodeId="plain")
        clock.advance(1.0)
        await set_capacity(http, 1)
        if judged == "post":  # a create posted right after capacity came back
            op = await http.ok("POST", NODES, NODE, nodeId="plain")
        assert await qr_state(http) == "PROVISIONING"
        clock.advance(2.0)
        assert (await op_of(http, op))["error"]["code"] == 8  # no capacity left for it
        assert await qr_state(http) == "ACTIVE"
        assert (await http.ok("GET", f"{NODES}/slice-q"))["state"] == "READY"
        assert (await http("GET", f"{NODES}/plain"))[0] == 404


@pytest.mark.parametrize("judged", ["post", "end"])
async def test_scan_lets_a_plain_create_take_capacity_freed_between_scans(
    session: aiohttp.ClientSession, judged: str
) -> None:
    async with cloud(session, "scan", judged) as (http, clock):
        await waiting_queued_resource(http, clock)  # START + 1.5
        if judged == "end":
            op = await http.ok("POST", NODES, NODE, nodeId="plain")
        clock.advance(1.0)
        await set_capacity(http, 1)  # START + 2.5: the next scan is at START + 10
        if judged == "post":
            op = await http.ok("POST", NODES, NODE, nodeId="plain")
        assert await qr_state(http) == "WAITING_FOR_RESOURCES"
        clock.advance(2.0)
        assert "error" not in await op_of(http, op)
        assert (await http.ok("GET", f"{NODES}/plain"))["state"] == "READY"
        clock.advance(START + SCAN - clock.now())  # the scan: nothing left for the queue
        assert await qr_state(http) == "WAITING_FOR_RESOURCES"
        await http.ok("DELETE", f"{NODES}/plain")
        clock.advance(1.0)  # plain gone at START + 11: freed between scans again
        assert await qr_state(http) == "WAITING_FOR_RESOURCES"
        clock.advance(START + 2 * SCAN - 0.1 - clock.now())
        assert await qr_state(http) == "WAITING_FOR_RESOURCES"
        clock.advance(
            START + 2 * SCAN - clock.now()
        )  # the next scan, nobody racing: the queue gets it
        assert await qr_state(http) == "PROVISIONING"


async def test_scan_serves_at_multiples_of_the_period_and_still_fails_on_valid_until(
    session: aiohttp.ClientSession,
) -> None:
    async with cloud(session, "scan") as (http, clock):
        await set_capacity(http, 0)
        policy = {"validUntilDuration": "4s"}
        await http.ok("POST", QRS, {**queued_body("late"), "queueingPolicy": policy},
                      queuedResourceId="late")  # fmt: skip
        await http.ok("POST", QRS, queued_body("slice-q"), queuedResourceId="q")
        clock.advance(4.0)  # validUntil, between scans: FAILED at that instant
        assert await qr_state(http, "late") == "FAILED"
        await set_capacity(http, None)
        assert await qr_state(http) == "WAITING_FOR_RESOURCES"
        clock.advance(START + SCAN - clock.now())
        assert await qr_state(http) == "PROVISIONING"
        node = await http.ok("GET", f"{NODES}/slice-q")
        assert node["createTime"].startswith("2027-01-15T08:00:10")  # START + 10 s, the scan


def test_the_options_and_the_cli_flags() -> None:
    assert EmulatorOptions().queued_serve == "at-once"
    with pytest.raises(ValueError, match="queued_serve"):
        EmulatorOptions(queued_serve="later")
    with pytest.raises(ValueError, match="queued_scan_seconds"):
        EmulatorOptions(queued_scan_seconds=0)
    args = build_parser().parse_args(["--queued-serve", "scan", "--queued-scan-seconds", "5"])
    assert (args.queued_serve, args.queued_scan_seconds) == ("scan", 5.0)
