"""What the MIG tests share: Google's official clients for instance templates, workload policies
and (zonal, regional) instance group managers pointed at the emulator, the bodies tpucared's
compute adapter sends (issue 28's shared design), and waits on listManagedInstances."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from compute_support import IMAGE, MT, P, Z, call
from emulator_http import Http
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from tpucared_emulator import EmulatorServer, running_emulator

R = "us-central1"
MIGS = f"/compute/v1/projects/{P}/zones/{Z}/instanceGroupManagers"
RMIGS = f"/compute/v1/projects/{P}/regions/{R}/instanceGroupManagers"
FAST = {"create_seconds": 0.1, "delete_seconds": 0.05, "compute_mig_retry_seconds": 0.1}


@dataclass
class Clients:
    server: EmulatorServer
    http: Http
    migs: compute_v1.InstanceGroupManagersClient
    regional: compute_v1.RegionInstanceGroupManagersClient
    templates: compute_v1.InstanceTemplatesClient
    policies: compute_v1.ResourcePoliciesClient
    instances: compute_v1.InstancesClient


def clients_of(server: EmulatorServer, http: Http) -> Clients:
    kw: dict[str, Any] = {"transport": "rest", "client_options": {"api_endpoint": server.url},
                          "credentials": AnonymousCredentials()}  # type: ignore[no-untyped-call]  # fmt: skip
    ops = {"zone_operations": compute_v1.ZoneOperationsClient(**kw),
           "region_operations": compute_v1.RegionOperationsClient(**kw),
           "global_operations": compute_v1.GlobalOperationsClient(**kw)}  # fmt: skip
    out = Clients(
        server,
        http,
        compute_v1.InstanceGroupManagersClient(**kw),
        compute_v1.RegionInstanceGroupManagersClient(**kw),
        compute_v1.InstanceTemplatesClient(**kw),
        compute_v1.ResourcePoliciesClient(**kw),
        compute_v1.InstancesClient(**kw),
    )
    # Each client follows its operations with an operations client it builds itself, with the
    # default endpoint and not the one it was given: hand it ours.
    for client in (out.migs, out.regional, out.templates, out.policies, out.instances):
        client._transport._extended_operations_services.update(ops)
    return out


@contextlib.asynccontextmanager
async def official(**options: Any) -> AsyncIterator[Clients]:
    async with (
        running_emulator(**{**FAST, **options}) as server,
        aiohttp.ClientSession() as session,
    ):
        yield clients_of(server, Http(server.url, session))


def template_body(
    name: str = "tpl", *, action: str = "STOP", bound: bool = False, **scheduling: Any
) -> dict[str, Any]:
    """A global instance template as the adapter sends it (bare machine type). `bound`: a
    calendar reservation's (RESERVATION_BOUND, deleted at its end, a specific reservation),
    one of the two kinds a BULK MIG takes (issue 39)."""
    if bound:
        body = template_body(name, action="DELETE", provisioningModel="RESERVATION_BOUND")
        body["properties"]["reservationAffinity"] = {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": ["r1"],
        }
        return body
    return {
        "name": name,
        "properties": {
            "machineType": MT,
            "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT",
                       "initializeParams": {"sourceImage": IMAGE, "diskSizeGb": "100",
                                            "diskType": "hyperdisk-balanced"}}],
            "networkInterfaces": [{"network": "global/networks/default",
                                   "accessConfigs": [{"type": "ONE_TO_ONE_NAT"}]}],
            "metadata": {"items": [{"key": "enable-guest-attributes", "value": "TRUE"}]},
            "labels": {"tpucared-fleet": "iron", "tpucared-owner": "test"},
            "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": action,
                           "onHostMaintenance": "TERMINATE", "automaticRestart": False,
                           **scheduling},
        },
    }  # fmt: skip


def policy_body(name: str = "wp-2x2x4", topology: str = "2x2x4") -> dict[str, Any]:
    return {"name": name, "workloadPolicy": {"type": "HIGH_THROUGHPUT",
                                             "acceleratorTopology": topology}}  # fmt: skip


def mig_body(
    name: str = "iron-0",
    *,
    size: int = 4,
    mode: str = "INDIVIDUAL",
    on_failure: str = "DO_NOTHING",
    policy: str | None = "wp-2x2x4",
    template: str = "tpl",
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "description": "slot 0 of iron",
        "instanceTemplate": f"projects/{P}/global/instanceTemplates/{template}",
        "baseInstanceName": f"{name}-w-###",
        "targetSize": size,
        "targetSizePolicy": {"mode": mode},
        "instanceLifecyclePolicy": {"defaultActionOnFailure": on_failure},
        **extra,
    }
    if policy:
        body["resourcePolicies"] = {
            "workloadPolicy": f"https://www.googleapis.com/compute/v1/projects/{P}/regions/{R}/"
            f"resourcePolicies/{policy}"
        }
    return body


async def insert(fn: Callable[..., Any], message: type[Any], field: str, **kw: Any) -> Any:
    """An insert through the official client, followed to DONE."""
    body = kw.pop("body")
    request = {**kw, field: message.from_json(json.dumps(body))}
    operation = await call(fn, **request)
    await call(operation.result, timeout=10)
    return operation


async def make_template(c: Clients, **kw: Any) -> None:
    await insert(c.templates.insert, compute_v1.InstanceTemplate, "instance_template_resource",
                 project=P, body=template_body(**kw))  # fmt: skip


async def make_policy(c: Clients, **kw: Any) -> None:
    await insert(c.policies.insert, compute_v1.ResourcePolicy, "resource_policy_resource",
                 project=P, region=R, body=policy_body(**kw))  # fmt: skip


async def make_mig(c: Clients, **kw: Any) -> Any:
    return await insert(c.migs.insert, compute_v1.InstanceGroupManager,
                        "instance_group_manager_resource", project=P, zone=Z,
                        body=mig_body(**kw))  # fmt: skip


async def managed(c: Clients, name: str = "iron-0") -> list[dict[str, Any]]:
    """listManagedInstances, raw: every field exactly as the emulator sent it."""
    payload = await c.http.ok("POST", f"{MIGS}/{name}/listManagedInstances")
    return list(payload.get("managedInstances", []))


async def until(
    check: Callable[[], Any], what: str, *, tries: int = 300, step: float = 0.02
) -> Any:
    """Poll an async `check` until it returns something truthy."""
    for _ in range(tries):
        value = await check()
        if value:
            return value
        await asyncio.sleep(step)
    raise AssertionError(f"never: {what}")


async def all_running(c: Clients, count: int, name: str = "iron-0") -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        members = await managed(c, name)
        ok = len(members) == count and all(m.get("instanceStatus") == "RUNNING" for m in members)
        return members if ok else None

    members: list[dict[str, Any]] = await until(check, f"{count} members RUNNING")
    return members


async def capacity(c: Clients, available: int | None, zone: str = Z) -> None:
    await c.http.ok("PUT", "/_emulator/v1/capacity",
                    {"zone": zone, "machine_type": MT, "available": available})  # fmt: skip
