"""The worker hosts of a multislice queued resource: every worker of every slice is an SSH
server with its own metadata server, exactly as for a node made by nodes.create; a notice and
a preemption reach only the slice they are for, and the queued resource follows."""

from __future__ import annotations

import asyncio

import aiohttp
from hosts_support import NODES, USER, Cloud, P, Z, eventually, listening

from tpucared.ssh import ssh_keys_metadata_entry

PARENT = f"projects/{P}/locations/{Z}"
QRS = f"/v2/{PARENT}/queuedResources"
SLICES = ("ms-0", "ms-1")


async def wait_qr(cloud: Cloud, wanted: str) -> None:
    state = ""
    for _ in range(250):
        state = (await cloud.http.ok("GET", f"{QRS}/ms"))["state"]["state"]
        if state == wanted:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the queued resource is {state}, not {wanted}")


async def preempted(session: aiohttp.ClientSession, address: str) -> str:
    url = f"http://{address}/computeMetadata/v1/instance/preempted"
    async with session.get(url, headers={"Metadata-Flavor": "Google"}) as response:
        assert response.status == 200
        return await response.text()


async def test_every_worker_of_every_slice_is_a_host(cloud: Cloud) -> None:
    node = {"acceleratorType": "v4-16", "runtimeVersion": "tpu-ubuntu2204-base",
            "metadata": {"ssh-keys": ssh_keys_metadata_entry(USER, cloud.key)}}  # fmt: skip
    spec = {"parent": PARENT, "multisliceParams": {"nodeCount": 2, "nodeIdPrefix": "ms"},
            "node": node}  # fmt: skip
    body = {"tpu": {"nodeSpec": [spec]}, "spot": {}}
    await cloud.http.ok("POST", QRS, body, queuedResourceId="ms")
    await wait_qr(cloud, "ACTIVE")

    metadata: dict[str, list[str]] = {}
    addresses: dict[str, list[str]] = {}
    for node_id in SLICES:
        listed = await cloud.http.ok("GET", f"{NODES}/{node_id}")
        assert listed["multisliceNode"] is True
        addresses[node_id] = [e["ipAddress"] for e in listed["networkEndpoints"]]
        await eventually(
            lambda n=node_id: all(listening(a, cloud.hosts.port) for a in addresses[n]), "up"
        )
        targets = await cloud.targets(node_id)
        results = await cloud.run(targets, 'echo "$GCE_METADATA_HOST"')
        assert [r.ok for r in results] == [True, True]
        metadata[node_id] = [r.stdout_tail.strip() for r in results]
    every_ip = [a for node_ips in addresses.values() for a in node_ips]
    assert len(set(every_ip)) == 4  # 2 slices x 2 workers, each its own machine
    every_metadata = [m for per_node in metadata.values() for m in per_node]
    assert len(set(every_metadata)) == 4

    async with aiohttp.ClientSession() as session:
        assert [await preempted(session, m) for m in every_metadata] == ["FALSE"] * 4
        noticed = await cloud.control("ms-0", "preempt", {"notice_seconds": 1})
        assert noticed["state"] == "READY"
        assert [await preempted(session, m) for m in metadata["ms-0"]] == ["TRUE"] * 2
        assert [await preempted(session, m) for m in metadata["ms-1"]] == ["FALSE"] * 2
    assert (await cloud.http.ok("GET", f"{QRS}/ms"))["state"]["state"] == "ACTIVE"

    await wait_qr(cloud, "SUSPENDED")
    await cloud.wait_state("ms-0", "PREEMPTED")
    port = cloud.hosts.port
    await eventually(lambda: not any(listening(a, port) for a in addresses["ms-0"]), "ms-0 down")
    # The other slice stays up, and usable, until the queued resource is deleted.
    results = await cloud.run(await cloud.targets("ms-1"), "echo still-here")
    assert [r.stdout_tail.strip() for r in results] == ["still-here"] * 2

    await cloud.http.ok("DELETE", f"{QRS}/ms", force="true")
    await eventually(lambda: not any(listening(a, port) for a in addresses["ms-1"]), "ms-1 down")
