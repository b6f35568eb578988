"""A fleet's node options end to end: the daemon creates nodes (and queued resources) carrying
the network, service account, tags, metadata, data disks and reservation of its config, and the
emulator, which validates them against the reference schema, shows them on the node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from runtime_support import PROJECT, SLOW, ZONE, Control, Daemon, wait_for, write_config

pytestmark = pytest.mark.slow

SA = "trainer@test-project.iam.gserviceaccount.com"
DISK = f"projects/{PROJECT}/zones/{ZONE}/disks/imagenet-shards"
RESERVATION = f"projects/{PROJECT}/locations/{ZONE}/reservations/grant-1"

FLEETS = f"""
[[fleet]]
name = "shaped"
zones = ["{ZONE}"]
accelerator_type = "v4-8"
runtime_version = "tpu-ubuntu2204-base"
size = 1
network = "projects/{PROJECT}/global/networks/research"
subnetwork = "projects/{PROJECT}/regions/us-central2/subnetworks/tpus"
service_account = "{SA}"
service_account_scopes = ["https://www.googleapis.com/auth/devstorage.read_only"]
tags = ["tpu", "no-ingress"]
metadata = {{ startup-script = "echo hi", team = "vision" }}
data_disks = [{{ source = "{DISK}", mode = "read-only" }}]

[[fleet]]
name = "held"
zones = ["{ZONE}"]
accelerator_type = "v4-8"
runtime_version = "tpu-ubuntu2204-base"
size = 1
capacity = "reserved"
provisioning = "queued"
reservation = "{RESERVATION}"
network = "research"
"""


async def _get(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def test_nodes_carry_the_fleets_options(
    tmp_path: Path, control: Control, daemons: Any
) -> None:
    config = write_config(tmp_path, control.emulator.url, size=0, extra_fleets=FLEETS)
    daemon: Daemon = await daemons(config).start()

    async def both_there() -> bool:
        names = {n["node_id"] for n in await control.nodes()}
        return {"shaped-0", "held-0"} <= names

    await wait_for(both_there, SLOW, "a node of each fleet")
    nodes = {n["node_id"]: n["node"] for n in await control.nodes()}

    shaped = nodes["shaped-0"]
    assert shaped["networkConfig"]["network"] == f"projects/{PROJECT}/global/networks/research"
    assert shaped["networkConfig"]["subnetwork"] == (
        f"projects/{PROJECT}/regions/us-central2/subnetworks/tpus"
    )
    assert shaped["networkConfig"]["enableExternalIps"] is True
    assert shaped["serviceAccount"] == {
        "email": SA,
        "scope": ["https://www.googleapis.com/auth/devstorage.read_only"],
    }
    assert shaped["tags"] == ["tpu", "no-ingress"]
    assert shaped["dataDisks"] == [{"sourceDisk": DISK, "mode": "READ_ONLY"}]
    metadata = shaped["metadata"]
    assert (metadata["startup-script"], metadata["team"]) == ("echo hi", "vision")
    assert metadata["ssh-keys"].startswith("tpucared:ssh-ed25519 ")  # ours, merged in

    held = nodes["held-0"]
    assert held["networkConfig"]["network"] == "research"
    assert "serviceAccount" not in held  # none asked: the project's default account
    base = f"{control.emulator.url}/v2/projects/{PROJECT}/locations/{ZONE}/queuedResources"
    queued = (await _get(base))["queuedResources"]
    assert [q["reservationName"] for q in queued] == [RESERVATION]
    assert daemon.process is not None
    assert daemon.process.returncode is None
