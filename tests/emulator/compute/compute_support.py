"""What the Compute Engine tests share: Google's official client (google-cloud-compute, REST
transport, anonymous credentials) pointed at the emulator, the instance body tpucared sends,
and the paths of the compute v1 and control APIs.

The official client is synchronous; tests run it in a worker thread (`call`) while the emulator
serves on the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import aiohttp
from emulator_http import Http
from google.api_core.extended_operation import ExtendedOperation
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from tpucared import ssh
from tpucared_emulator import EmulatorServer, running_emulator

P, Z = "proof", "us-central1-c"
MT = "tpu7x-standard-4t"
ZONE = f"/compute/v1/projects/{P}/zones/{Z}"
CONTROL = f"/_emulator/v1/projects/{P}/zones/{Z}/instances"
IMAGE = (
    "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accel-2404-amd64-tpu-tpu7x"
)
T = TypeVar("T")

# The SSH side of the hosts tests (test_compute_hosts, test_mig_hosts): the login, a patient
# retry while a VM's sshd comes up, and a command that prints one key of the instance's metadata
# server (argv[1]) as the guest sees it.
USER = "tester"
FAST_RETRY = ssh.RetryPolicy(attempts=50, initial_delay=0.02, max_delay=0.1, jitter=0.0)
METADATA = (
    'python3 -c "import os, sys, urllib.request as u; '
    "r = u.Request('http://' + os.environ['GCE_METADATA_HOST'] + '/computeMetadata/v1/instance/' "
    "+ sys.argv[1], headers={'Metadata-Flavor': 'Google'}); print(u.urlopen(r).read().decode())\" "
)


def clients(
    emulator: EmulatorServer,
) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
    options = {"api_endpoint": emulator.url}
    credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    instances = compute_v1.InstancesClient(
        transport="rest", client_options=options, credentials=credentials
    )
    operations = compute_v1.ZoneOperationsClient(
        transport="rest", client_options=options, credentials=credentials
    )
    # The client follows an operation with a ZoneOperationsClient it builds itself, with the
    # default endpoint and not the one it was given: hand it ours.
    instances._transport._extended_operations_services["zone_operations"] = operations
    return instances, operations


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking client call off the loop the emulator serves on."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def result(operation: ExtendedOperation) -> Any:
    return await call(operation.result, timeout=10)


def body(
    name: str, *, action: str = "STOP", owner: str = "test", zone: str = Z, **extra: Any
) -> dict[str, Any]:
    """An insert body as tpucared's compute fleets send it (issue 27, "The REST calls")."""
    return {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/{MT}",
        "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT",
                   "initializeParams": {"sourceImage": IMAGE, "diskSizeGb": "100",
                                        "diskType": f"zones/{Z}/diskTypes/hyperdisk-balanced"}}],
        "networkInterfaces": [{"network": "global/networks/default",
                               "accessConfigs": [{"type": "ONE_TO_ONE_NAT"}]}],
        "serviceAccounts": [{"email": "default", "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
        "metadata": {"items": [{"key": "enable-guest-attributes", "value": "TRUE"}]},
        "labels": {"tpucared-fleet": "iron", "tpucared-owner": owner},
        "tags": {"items": ["tpucared"]},
        "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": action,
                       "onHostMaintenance": "TERMINATE", "automaticRestart": False},
        **extra,
    }  # fmt: skip


def instance(name: str, **kwargs: Any) -> compute_v1.Instance:
    """`body()` as the official client's message."""
    return compute_v1.Instance.from_json(json.dumps(body(name, **kwargs)))


async def wait_status(http: Http, name: str, status: str | None) -> dict[str, Any] | None:
    """Poll instances.get until `status` (None: until it is gone, 404)."""
    for _ in range(250):
        code, payload = await http("GET", f"{ZONE}/instances/{name}")
        if status is None and code == 404:
            return None
        if code == 200 and payload["status"] == status:
            return dict(payload)
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} never became {status or 'gone'}")


async def running(http: Http, name: str, **kwargs: Any) -> dict[str, Any]:
    """Insert an instance (raw HTTP) and wait until it is RUNNING."""
    await http.ok("POST", f"{ZONE}/instances", body(name, **kwargs))
    vm = await wait_status(http, name, "RUNNING")
    assert vm is not None
    return vm


@contextlib.asynccontextmanager
async def emulator_with(**options: Any) -> AsyncIterator[Http]:
    """The raw-HTTP helper on an emulator of its own, with fast timing and these options."""
    async with (
        running_emulator(**{"create_seconds": 0.1, "delete_seconds": 0.05, **options}) as server,
        aiohttp.ClientSession() as session,
    ):
        yield Http(server.url, session)
