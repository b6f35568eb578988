"""Fidelity proof: Google's own client (google-cloud-compute 1.57, REST transport) drives the
emulator's Compute Engine surface: an insert followed to DONE, a label-filtered list over
several pages, get, delete, a stockout raised from the operation's error, a preempted VM seen
TERMINATED with its compute.instances.preempted operation, and requestId idempotency."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from compute_support import CONTROL, MT, P, Z, call, clients, instance, result
from emulator_http import Http
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from tpucared_emulator import EmulatorServer

API = "https://www.googleapis.com/compute/v1"


async def insert(client: compute_v1.InstancesClient, name: str, **kwargs: Any) -> Any:
    request = compute_v1.InsertInstanceRequest(
        project=P, zone=Z, instance_resource=instance(name, **kwargs)
    )
    return await call(client.insert, request=request)


async def test_insert_followed_to_done_then_get_and_delete(emulator: EmulatorServer) -> None:
    instances, _ = clients(emulator)
    operation = await insert(instances, "iron-0")
    assert operation.status != compute_v1.Operation.Status.DONE  # RUNNING while provisioning
    await result(operation)
    assert operation.done()
    assert not operation.error_code

    vm = await call(instances.get, project=P, zone=Z, instance="iron-0")
    assert vm.status == "RUNNING"
    assert vm.machine_type == f"{API}/projects/{P}/zones/{Z}/machineTypes/{MT}"
    assert vm.self_link == f"{API}/projects/{P}/zones/{Z}/instances/iron-0"
    assert vm.scheduling.provisioning_model == "SPOT"
    assert vm.scheduling.instance_termination_action == "STOP"
    assert vm.labels["tpucared-owner"] == "test"
    assert vm.id
    assert vm.creation_timestamp
    nic = vm.network_interfaces[0]
    assert nic.network_i_p.startswith("127.")
    assert nic.access_configs[0].nat_i_p == nic.network_i_p
    assert {i.key: i.value for i in vm.metadata.items}["enable-guest-attributes"] == "TRUE"

    keys = await call(
        instances.get_guest_attributes,
        request=compute_v1.GetGuestAttributesInstanceRequest(
            project=P, zone=Z, instance="iron-0", query_path="hostkeys/"
        ),
    )
    [key] = keys.query_value.items
    assert (key.namespace, key.key) == ("hostkeys", "ssh-ed25519")
    assert key.value

    deleting = await call(instances.delete, project=P, zone=Z, instance="iron-0")
    await result(deleting)
    with pytest.raises(gexc.NotFound, match="instances/iron-0' was not found"):
        await call(instances.get, project=P, zone=Z, instance="iron-0")


async def test_a_label_filtered_list_over_several_pages(emulator: EmulatorServer) -> None:
    instances, _ = clients(emulator)
    ours = [f"iron-{i}" for i in range(7)]
    for name in ours:
        await insert(instances, name, owner="me")
    for name in ("other-0", "other-1", "other-2"):
        await insert(instances, name, owner="someone-else")

    for spelling in ("labels.tpucared-owner=me", 'labels.tpucared-owner = "me"'):
        request = compute_v1.ListInstancesRequest(project=P, zone=Z, filter=spelling, max_results=3)
        pager = await call(instances.list, request=request)
        pages = await call(lambda p=pager: [[vm.name for vm in page.items] for page in p.pages])
        assert [name for page in pages for name in page] == ours, spelling
        assert len(pages) >= 3
        assert all(len(page) <= 3 for page in pages)


async def test_a_stockout_is_the_operations_error(emulator: EmulatorServer, http: Http) -> None:
    await http.ok("PUT", "/_emulator/v1/capacity", {"zone": Z, "machine_type": MT, "available": 0})
    instances, _ = clients(emulator)
    operation = await insert(instances, "iron-0")
    with pytest.raises(gexc.ServiceUnavailable) as raised:
        await result(operation)
    text = str(raised.value)
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in text
    assert f"A {MT} VM instance is currently unavailable in the {Z} zone." in text
    assert operation.http_error_status_code == 503
    # A failed insert leaves nothing behind.
    with pytest.raises(gexc.NotFound):
        await call(instances.get, project=P, zone=Z, instance="iron-0")


async def test_a_preempted_stop_vm_is_terminated_with_its_preempted_operation(
    emulator: EmulatorServer, http: Http
) -> None:
    instances, operations = clients(emulator)
    await result(await insert(instances, "iron-0", action="STOP"))
    await result(await insert(instances, "iron-1", action="STOP"))
    await http.ok("POST", f"{CONTROL}/iron-0:preempt")

    async def status() -> str:
        return (await call(instances.get, project=P, zone=Z, instance="iron-0")).status

    while (seen := await status()) != "TERMINATED":
        assert seen == "STOPPING"
    link = f"{API}/projects/{P}/zones/{Z}/instances/iron-0"
    request = compute_v1.ListZoneOperationsRequest(
        project=P,
        zone=Z,
        filter=f'operationType="compute.instances.preempted" AND targetLink="{link}"',
    )
    [preempted] = list(await call(operations.list, request=request))
    assert preempted.operation_type == "compute.instances.preempted"
    assert preempted.user == "system"
    assert preempted.name.startswith("systemevent-")
    assert preempted.status == compute_v1.Operation.Status.DONE
    assert preempted.target_link == link
    assert not preempted.error.errors
    # The other VM was not preempted, and the inserts are not preemptions.
    everything = list(await call(operations.list, project=P, zone=Z))
    assert [op.target_link for op in everything if "preempted" in op.operation_type] == [link]


async def test_a_repeated_request_id_returns_the_same_operation(emulator: EmulatorServer) -> None:
    instances, _ = clients(emulator)
    request_id = str(uuid.uuid4())
    request = compute_v1.InsertInstanceRequest(
        project=P, zone=Z, instance_resource=instance("iron-0"), request_id=request_id
    )
    first = await call(instances.insert, request=request)
    again = await call(instances.insert, request=request)
    assert again.name == first.name
    await result(again)
    done = await call(instances.insert, request=request)  # even once DONE
    assert done.name == first.name
    assert done.done()
    # Without it, the same insert is a new one, for a name that is taken.
    with pytest.raises(gexc.Conflict, match="already exists"):
        await insert(instances, "iron-0")
