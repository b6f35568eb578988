"""Flex-start VMs on the emulated Compute Engine (compute/flex.py), driven by Google's client
where it matters: PENDING until the (zone, machine type) capacity has room, then RUNNING with
resourceStatus.scheduling.terminationTimestamp = start + maxRunDuration (issue 39); the FIFO
queue; the run's end at its duration; each unconfirmed behaviour's option; the insert's
validation; control actions and deletes on a PENDING VM. Runs are seconds long through
`compute_flex_min_run_seconds`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from compute_support import CONTROL, MT, ZONE, P, Z, body, call, clients, result, wait_status
from emulator_http import Http
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from tpucared_emulator import EmulatorServer, running_emulator

OP = f"{ZONE}/operations"
CAPACITY = "/_emulator/v1/capacity"
RUN_END_OP = "compute.instances.maxRunDurationTermination"  # flex.py's invented name


def flex(name: str, run_s: int = 600, **extra: Any) -> dict[str, Any]:
    """A flex-start insert body as tpucared's compute adapter sends it (bodies.py)."""
    return body(
        name,
        scheduling={"provisioningModel": "FLEX_START", "maxRunDuration": {"seconds": str(run_s)},
                    "instanceTerminationAction": "DELETE", "onHostMaintenance": "TERMINATE",
                    "automaticRestart": False},
        reservationAffinity={"consumeReservationType": "NO_RESERVATION"},
        **extra,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def flex_emulator(**options: Any) -> AsyncIterator[tuple[EmulatorServer, Http]]:
    """An emulator of its own with fast timing, one-second flex runs allowed, these options."""
    defaults = {"create_seconds": 0.1, "delete_seconds": 0.05, "compute_flex_min_run_seconds": 1}
    async with (
        running_emulator(**{**defaults, **options}) as server,
        aiohttp.ClientSession() as session,
    ):
        yield server, Http(server.url, session)


async def capacity(http: Http, available: int | None) -> None:
    await http.ok("PUT", CAPACITY, {"zone": Z, "machine_type": MT, "available": available})


def when(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def test_pending_until_capacity_then_running_with_a_termination_time() -> None:
    async with flex_emulator() as (server, http):
        instances, _ = clients(server)
        await capacity(http, 0)
        resource = compute_v1.Instance.from_json(json.dumps(flex("fs-0")))
        operation = await call(instances.insert, project=P, zone=Z, instance_resource=resource)
        await result(operation)  # done_when_pending (default): DONE once the VM waits
        assert not operation.error_code
        vm = await call(instances.get, project=P, zone=Z, instance="fs-0")
        assert vm.status == "PENDING"
        assert not vm.resource_status.scheduling.termination_timestamp
        assert vm.scheduling.provisioning_model == "FLEX_START"

        await capacity(http, 1)
        await wait_status(http, "fs-0", "RUNNING")
        vm = await call(instances.get, project=P, zone=Z, instance="fs-0")
        ends = when(vm.resource_status.scheduling.termination_timestamp) - when(
            vm.last_start_timestamp
        )
        assert ends == pytest.approx(600, abs=0.01)
        # The end is output only; `scheduling.terminationTime` (an input) is not filled.
        assert not vm.scheduling.termination_time
        [listed] = list(await call(instances.list, project=P, zone=Z))
        assert (
            listed.resource_status.scheduling.termination_timestamp
            == vm.resource_status.scheduling.termination_timestamp
        )


async def test_the_queue_is_first_come_first_served() -> None:
    async with flex_emulator() as (_, http):
        await capacity(http, 1)
        await http.ok("POST", f"{ZONE}/instances", flex("fs-a"))
        await wait_status(http, "fs-a", "RUNNING")
        for name in ("fs-3", "fs-1", "fs-2"):  # not in name order
            await http.ok("POST", f"{ZONE}/instances", flex(name))
            assert (await http.ok("GET", f"{ZONE}/instances/{name}"))["status"] == "PENDING"
        await http.ok("DELETE", f"{ZONE}/instances/fs-a")  # its capacity: the earliest's
        await wait_status(http, "fs-3", "RUNNING")
        for name in ("fs-1", "fs-2"):
            assert (await http.ok("GET", f"{ZONE}/instances/{name}"))["status"] == "PENDING"
        await capacity(http, 2)  # a raised limit serves the next one
        await wait_status(http, "fs-1", "RUNNING")
        assert (await http.ok("GET", f"{ZONE}/instances/fs-2"))["status"] == "PENDING"


async def test_the_run_ends_at_its_duration_with_no_operation_by_default() -> None:
    async with flex_emulator() as (_, http):
        await http.ok("POST", f"{ZONE}/instances", flex("fs-0", run_s=1))
        vm = await wait_status(http, "fs-0", "RUNNING")
        assert vm is not None
        run = when(vm["resourceStatus"]["scheduling"]["terminationTimestamp"]) - when(
            vm["lastStartTimestamp"]
        )
        assert run == pytest.approx(1, abs=1e-5)
        await wait_status(http, "fs-0", "STOPPING")
        await wait_status(http, "fs-0", None)  # DELETE: gone
        assert (await http.ok("GET", OP, filter='user = "system"')).get("items") is None


async def test_the_run_seconds_knob_shortens_a_ten_minute_run() -> None:
    """`compute_flex_run_seconds` (a test knob): a run asked for 10 minutes, as a daemon's
    config must, lasts 1 s, and terminationTimestamp says so."""
    async with flex_emulator(compute_flex_run_seconds=1.0) as (_, http):
        await http.ok("POST", f"{ZONE}/instances", flex("fs-0", run_s=600))
        vm = await wait_status(http, "fs-0", "RUNNING")
        assert vm is not None
        run = when(vm["resourceStatus"]["scheduling"]["terminationTimestamp"]) - when(
            vm["lastStartTimestamp"]
        )
        assert run == pytest.approx(1, abs=1e-5)
        await wait_status(http, "fs-0", None)


async def test_the_run_end_options() -> None:
    async with flex_emulator(
        compute_flex_run_end="terminate", compute_flex_run_end_records="system_op"
    ) as (_, http):
        await capacity(http, 1)
        await http.ok("POST", f"{ZONE}/instances", flex("fs-0", run_s=1))
        await http.ok("POST", f"{ZONE}/instances", flex("fs-1", run_s=1))
        await wait_status(http, "fs-0", "TERMINATED")
        [op] = (await http.ok("GET", OP, filter='user = "system"'))["items"]
        assert op["operationType"] == RUN_END_OP
        assert op["status"] == "DONE"
        assert op["targetLink"].endswith("/instances/fs-0")
        await wait_status(http, "fs-1", "RUNNING")  # the ended run gave its capacity back


async def test_done_when_running_keeps_the_insert_operation_running_while_pending() -> None:
    async with flex_emulator(compute_flex_insert_op="done_when_running") as (_, http):
        await capacity(http, 0)
        op = await http.ok("POST", f"{ZONE}/instances", flex("fs-0"))
        await wait_status(http, "fs-0", "PENDING")
        assert (await http.ok("GET", f"{OP}/{op['name']}"))["status"] == "RUNNING"
        await capacity(http, None)
        await wait_status(http, "fs-0", "RUNNING")
        done = await http.ok("GET", f"{OP}/{op['name']}")
        assert done["status"] == "DONE"
        assert "error" not in done


def short_wait(name: str) -> dict[str, Any]:
    return flex(name, params={"requestValidForDuration": {"seconds": "0", "nanos": 200_000_000}})


@pytest.mark.parametrize(
    ("expiry", "status", "code"),
    [
        ("instance_deleted", None, None),
        ("instance_terminated", "TERMINATED", None),
        ("op_error", None, "FLEX_START_REQUEST_EXPIRED"),
    ],
)
async def test_the_request_expiry_options(
    expiry: str, status: str | None, code: str | None
) -> None:
    async with flex_emulator(compute_flex_expiry=expiry) as (_, http):
        await capacity(http, 0)
        op = await http.ok("POST", f"{ZONE}/instances", short_wait("fs-0"))
        assert (await http.ok("GET", f"{ZONE}/instances/fs-0"))["status"] == "PENDING"
        await wait_status(http, "fs-0", status)
        insert = await http.ok("GET", f"{OP}/{op['name']}")
        assert insert["status"] == "DONE"
        assert [e["code"] for e in insert.get("error", {}).get("errors", [])] == (
            [code] if code else []
        )
        await capacity(http, 1)  # it left the queue: nothing takes the capacity
        await http.ok("POST", f"{ZONE}/instances", flex("fs-1"))
        await wait_status(http, "fs-1", "RUNNING")


async def test_a_pending_vm_deleted_leaves_the_queue() -> None:
    async with flex_emulator() as (server, http):
        instances, _ = clients(server)
        await capacity(http, 0)
        for name in ("fs-0", "fs-1", "fs-2"):
            await http.ok("POST", f"{ZONE}/instances", flex(name))
        await result(await call(instances.delete, project=P, zone=Z, instance="fs-0"))
        await wait_status(http, "fs-0", None)
        await http.ok("POST", f"{CONTROL}/fs-1:terminate")  # the control API works on it too
        assert (await http.ok("GET", f"{ZONE}/instances/fs-1"))["status"] == "TERMINATED"
        await capacity(http, 1)
        await wait_status(http, "fs-2", "RUNNING")
        assert (await http.ok("GET", CAPACITY))["capacity"][0]["in_use"] == 1
        await http.ok("POST", f"{CONTROL}/fs-2:vanish")
        await wait_status(http, "fs-2", None)


def with_scheduling(**changes: Any) -> dict[str, Any]:
    """A flex body whose scheduling has these changes (None: the key left out)."""
    out = flex("fs-bad")
    scheduling = {**out["scheduling"], **changes}
    out["scheduling"] = {k: v for k, v in scheduling.items() if v is not None}
    return out


@pytest.mark.parametrize(
    ("resource", "reason", "words"),
    [
        (with_scheduling(maxRunDuration=None), "required", "scheduling.maxRunDuration"),
        (with_scheduling(maxRunDuration={"seconds": "599"}), "invalid", "between 600 and"),
        (with_scheduling(maxRunDuration={"seconds": "604801"}), "invalid", "604800 seconds"),
        (with_scheduling(maxRunDuration={"seconds": "ten"}), "invalid", "maxRunDuration"),
        (with_scheduling(instanceTerminationAction="STOP"), "invalid", "DELETE termination"),
        (with_scheduling(preemptible=True), "invalid", "cannot be preemptible or Spot"),
        (
            flex("fs-bad", params={"requestValidForDuration": {"seconds": "0"}}),
            "invalid",
            "params.requestValidForDuration",
        ),
    ],
)
async def test_flex_inserts_are_validated(
    http: Http, resource: dict[str, Any], reason: str, words: str
) -> None:
    status, payload = await http("POST", f"{ZONE}/instances", resource)
    assert status == 400
    [error] = payload["error"]["errors"]
    assert error["reason"] == reason
    assert words in error["message"]
    assert (await http("GET", f"{ZONE}/instances/fs-bad"))[0] == 404


async def test_googles_client_sees_a_bad_run_duration_as_bad_request(
    emulator: EmulatorServer,
) -> None:
    instances, _ = clients(emulator)
    resource = compute_v1.Instance.from_json(json.dumps(flex("fs-0", run_s=60)))
    with pytest.raises(gexc.BadRequest, match="maxRunDuration"):
        await call(instances.insert, project=P, zone=Z, instance_resource=resource)


async def test_a_restart_keeps_the_queue_and_the_planned_end(tmp_path: Path) -> None:
    options = {"capacity": {(Z, MT): 1}, "state_file": str(tmp_path / "state.json")}
    async with flex_emulator(**options) as (_, http):
        await http.ok("POST", f"{ZONE}/instances", flex("fs-a"))
        vm = await wait_status(http, "fs-a", "RUNNING")
        assert vm is not None
        await http.ok("POST", f"{ZONE}/instances", flex("fs-b"))
    async with flex_emulator(**options) as (_, http):  # a new emulator on the saved state
        again = await http.ok("GET", f"{ZONE}/instances/fs-a")
        assert again["status"] == "RUNNING"
        assert (
            again["resourceStatus"]["scheduling"]["terminationTimestamp"]
            == vm["resourceStatus"]["scheduling"]["terminationTimestamp"]
        )
        assert (await http.ok("GET", f"{ZONE}/instances/fs-b"))["status"] == "PENDING"
        await http.ok("DELETE", f"{ZONE}/instances/fs-a")
        await wait_status(http, "fs-b", "RUNNING")
