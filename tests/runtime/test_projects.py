"""Fleets in two projects, one daemon: each (project, zone) is listed once per tick, each
fleet's nodes are created, replaced and deleted in its own project, even where two projects
share a zone, and a fleet removed from the config is still taken down where it lives (the
project is recorded with the node)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from runtime_support import (
    PROJECT,
    SLOW,
    ZONE,
    Control,
    Daemon,
    cli_env,
    query,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.slow

OTHER = "other-grant"

AWAY = f"""
[[fleet]]
name = "away"
project = "{OTHER}"
zones = ["{ZONE}"]
accelerator_type = "v4-8"
runtime_version = "tpu-ubuntu2204-base"
size = 1
"""


def _where(nodes: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """node id -> (project, state) of every node the emulator holds."""
    return {n["node_id"]: (n["project"], n["state"]) for n in nodes}


async def test_two_projects_in_one_daemon(tmp_path: Path, control: Control, daemons: Any) -> None:
    config = write_config(tmp_path, control.emulator.url, size=1, extra_fleets=AWAY)
    db = tmp_path / "state.db"
    daemon: Daemon = await daemons(config).start()

    async def both_ready() -> bool:
        where = _where(await control.nodes())
        return where.get("sweep-0") == (PROJECT, "READY") and where.get("away-0") == (
            OTHER,
            "READY",
        )

    await wait_for(both_ready, SLOW, "sweep-0 in our project and away-0 in the other, READY")
    rows = {r["node_name"]: r["project"] for r in query(db, "SELECT * FROM nodes")}
    assert rows == {"sweep-0": "", "away-0": OTHER}

    # One list per (project, zone) per tick: the same zone, listed in each project.
    since = control.emulator.state.now()
    await wait_for(
        lambda: _lists_since(control, since, 3), SLOW, "three ticks' lists in each project"
    )
    lists = [
        r["path"]
        for r in await control.requests(since)
        if r["method"] == "GET" and r["path"].endswith(f"/locations/{ZONE}/nodes")
    ]
    per_project = {p: sum(1 for x in lists if f"/projects/{p}/" in x) for p in (PROJECT, OTHER)}
    assert abs(per_project[PROJECT] - per_project[OTHER]) <= 1, per_project

    # A preemption in the other project is replaced there.
    old = next(n for n in await control.nodes() if n["node_id"] == "away-0")["node"]["id"]
    await control.node_action("away-0", "preempt", project=OTHER)

    async def replaced() -> bool:
        node = next((n for n in await control.nodes() if n["node_id"] == "away-0"), None)
        return (
            node is not None
            and node["project"] == OTHER
            and node["state"] == "READY"
            and node["node"]["id"] != old
        )

    await wait_for(replaced, SLOW, "away-0 recreated in its own project")
    assert _where(await control.nodes())["sweep-0"] == (PROJECT, "READY")

    # The fleet leaves the config, and `tpucared down` takes it down: its node is deleted in
    # its own project, known from the record alone (the config no longer names it).
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(30) == 0
    write_config(tmp_path, control.emulator.url, size=1)
    down = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tpucared", "down", "-c", str(config), "away", "--yes",
        "--timeout", "60s",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=cli_env(),
    )  # fmt: skip
    out, err = await asyncio.wait_for(down.communicate(), 90)
    assert down.returncode == 0, (out.decode(), err.decode())
    assert f"deleting away-0 in {ZONE}" in out.decode()
    assert _where(await control.nodes()) == {"sweep-0": (PROJECT, "READY")}


async def _lists_since(control: Control, since: float, ticks: int) -> bool:
    paths = [r["path"] for r in await control.requests(since) if r["method"] == "GET"]
    return all(
        sum(1 for p in paths if p.endswith(f"/projects/{proj}/locations/{ZONE}/nodes")) >= ticks
        for proj in (PROJECT, OTHER)
    )
