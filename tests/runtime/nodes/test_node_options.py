"""A fleet's node options end to end: the daemon creates nodes (and queued resources) carrying
the network, service account, tags, metadata, data disks and reservation of its config, and the
emulator, which validates them against the reference schema, shows them on the node."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from runtime_support import SLOW, Control, Daemon, converged, query, wait_for, write_config

from bench.daemon_config import PROJECT, ZONE

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


async def test_an_edited_option_is_reported_not_recreated(
    tmp_path: Path, control: Control, daemons: Any
) -> None:
    """Editing a fleet's options never throws away running nodes: the serving node made with
    the old ones is named in a notice, and keeps running until it dies."""
    config = write_config(tmp_path, control.emulator.url, size=0, extra_fleets=FLEETS)
    first: Daemon = await daemons(config).start()
    await wait_for(lambda: converged(control, tmp_path / "state.db", 1, "shaped"), SLOW, "READY")
    before = {n["node_id"]: n["node"]["id"] for n in await control.nodes()}
    first.signal(signal.SIGTERM)
    assert await first.wait(30) == 0

    edited = FLEETS.replace('tags = ["tpu", "no-ingress"]', 'tags = ["tpu", "egress-only"]')
    other = "evaluator@test-project.iam.gserviceaccount.com"
    edited = edited.replace(f'service_account = "{SA}"', f'service_account = "{other}"')
    write_config(tmp_path, control.emulator.url, size=0, extra_fleets=edited)
    await daemons(config).start()

    async def notices() -> list[str]:
        rows = query(tmp_path / "state.db", "SELECT message FROM events WHERE kind = 'notice'")
        return [r["message"] for r in rows if "differ from its spec" in r["message"]]

    await wait_for(notices, SLOW, "the drift notice")
    (reason,) = await notices()
    assert reason.startswith("fleet shaped's nodes differ from its spec: ")
    assert f"shaped-0 service account {SA} (asks {other})" in reason
    assert "shaped-0 tags ['no-ingress', 'tpu'] (asks ['egress-only', 'tpu'])" in reason
    assert "network" not in reason  # unchanged: not reported
    assert {n["node_id"]: n["node"]["id"] for n in await control.nodes()} == before
