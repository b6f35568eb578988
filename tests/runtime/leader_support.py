"""Two real daemons on one PostgreSQL and the emulator: their configs (`Pair`, made by the
`pair` fixture in conftest.py), and what the leader tests read of them (the lease, the live
incarnations, /healthz, the cloud calls made)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from postgres_support import PostgresServer
from runtime_support import SLOW, Control, Daemon, ours, wait_for

LEASE_S = 3.0
POLL_S = 0.3
# A loaded 2-core machine: a tick, a delete and its operation poll on top of lease + poll.
SLACK_S = 4.0


@dataclass
class Pair:
    """The two daemons' configs (same database and fleet, their own HTTP ports)."""

    db: str
    configs: tuple[Path, Path]
    ports: tuple[int, int]
    postgres: PostgresServer

    async def rows(self, sql: str) -> list[list[str]]:
        try:
            out = await asyncio.to_thread(self.postgres.psql, sql, self.db)
        except Exception as exc:
            if "does not exist" in str(exc):
                return []  # still migrating
            raise
        return [line.split("|") for line in out.splitlines() if line]

    async def leader_pid(self) -> int | None:
        rows = await self.rows(
            "SELECT holder_pid FROM leader_lease "
            "WHERE expires_at > now() AND holder_pid IS NOT NULL"
        )
        return int(rows[0][0]) if rows else None

    async def live(self) -> list[list[str]]:
        return await self.rows(
            "SELECT slot, id, phase FROM nodes WHERE phase IN "
            "('requested','creating','ready','dead','deleting') ORDER BY slot"
        )


async def http(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


async def healthy(port: int) -> bool:
    try:
        return (await http(port, "/healthz"))[0] == 200
    except aiohttp.ClientError:
        return False


async def ready(control: Control, pair: Pair, n: int = 3) -> list[list[str]] | None:
    """The live incarnations once n are READY, here and in the cloud, and nothing else."""
    live = await pair.live()
    cloud = ours(await control.nodes())
    if len(live) != n or len(cloud) != n:
        return None
    if all(r[2] == "ready" for r in live) and all(x["node"]["state"] == "READY" for x in cloud):
        return live
    return None


async def leader_then_standby(
    control: Control, pair: Pair, daemons: Callable[[Path], Daemon]
) -> tuple[Daemon, Daemon, list[list[str]]]:
    """A leads with the fleet READY; B stands by, healthy, and says so."""
    a = await daemons(pair.configs[0]).start()
    first = await wait_for(lambda: ready(control, pair), SLOW, "3 nodes READY")
    assert await pair.leader_pid() == a.pid
    b = await daemons(pair.configs[1]).start()

    async def standing_by() -> bool:
        try:
            code, text = await http(pair.ports[1], "/healthz")
        except aiohttp.ClientError:
            return False
        return code == 200 and text.strip() == "ok: standby"

    await wait_for(standing_by, SLOW, "B healthy as a standby")
    _, status = await http(pair.ports[1], "/v1/status")
    leader = json.loads(status)["leader"]
    assert (leader["role"], leader["pid"], leader["epoch"], leader["warning"]) == (
        "standby",
        a.pid,
        1,
        None,
    )
    _, metrics = await http(pair.ports[1], "/metrics")
    assert "tpucared_leader 0.0" in metrics
    assert "tpucared_lease_epoch 1.0" in metrics  # the leader's term, as the standby saw it
    _, metrics = await http(pair.ports[0], "/metrics")
    assert "tpucared_leader 1.0" in metrics
    assert "tpucared_lease_epoch 1.0" in metrics
    return a, b, first


def mutations(requests: list[dict[str, object]]) -> list[str]:
    """Creates and deletes of nodes (and queued resources) in a request log."""
    return [
        f"{r['method']} {r['path']}"
        for r in requests
        if r["method"] in ("POST", "DELETE") and str(r["path"]).startswith("/v2/")
    ]


async def replaced(control: Control, pair: Pair, old_id: str) -> list[list[str]] | None:
    live = await ready(control, pair)
    return live if live and old_id not in {r[1] for r in live} else None
