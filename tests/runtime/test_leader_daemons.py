"""Two real daemons (`python -m tpucared run`) on one PostgreSQL and the emulator: one leads,
the other stands by (healthy, serving its role), and takes over when the leader is killed
(kill -9) or paused (SIGSTOP); a paused leader that resumes after losing the lease makes no
cloud call that creates or deletes, and stands by. The database is read with `psql`, the
cloud through the emulator's control API and request log."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import aiohttp
import pytest
from postgres_support import PostgresServer
from runtime_support import SLOW, Control, Daemon, free_port, ours, wait_for, write_config

pytestmark = pytest.mark.slow

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


@pytest.fixture
async def pair(tmp_path: Path, control: Control, postgres: PostgresServer) -> AsyncIterator[Pair]:
    name = postgres.create_database()
    url = postgres.url(name).render_as_string(hide_password=False)
    ports = (free_port(), free_port())
    configs = []
    for i, port in enumerate(ports):
        config = write_config(
            tmp_path, control.emulator.url, http_port=port, poll=f"{POLL_S}s", name=f"f{i}.toml"
        )
        text = config.read_text(encoding="utf-8")
        text = text.replace('db = "state.db"', f'db = "{url}"\nlease = "{LEASE_S}s"')
        config.write_text(text, encoding="utf-8")
        configs.append(config)
    try:
        yield Pair(name, (configs[0], configs[1]), ports, postgres)
    finally:
        postgres.drop_database(name)


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


async def test_the_standby_takes_over_when_the_leader_is_killed(
    control: Control, pair: Pair, daemons: Callable[[Path], Daemon]
) -> None:
    a, b, first = await leader_then_standby(control, pair, daemons)
    killed_at = time.time()
    await a.kill()
    await control.node_action("sweep-1", "preempt")
    await wait_for(lambda: replaced(control, pair, first[1][1]), SLOW, "sweep-1 replaced")
    assert await pair.leader_pid() == b.pid
    acted = mutations(await control.requests(since=killed_at))
    assert acted, "B made no call"
    first_call = min(
        float(r["time"]) for r in await control.requests(since=killed_at) if mutations([r])
    )
    assert first_call - killed_at < LEASE_S + POLL_S + SLACK_S, acted
    changes = await pair.rows(
        "SELECT details::jsonb ->> 'pid', details::jsonb ->> 'epoch' FROM events "
        "WHERE kind = 'leader_changed' ORDER BY id"
    )
    assert changes == [[str(a.pid), "1"], [str(b.pid), "2"]]
    assert await http(pair.ports[1], "/healthz") == (200, "ok\n")
    b.signal(signal.SIGTERM)
    assert await b.wait(30) == 0
    released = await pair.rows("SELECT count(*) FROM events WHERE kind = 'leader_released'")
    assert released == [["1"]]
    assert await pair.leader_pid() is None  # released at the stop: nobody leads


async def test_a_paused_leader_that_resumes_stands_by_and_calls_nothing(
    control: Control, pair: Pair, daemons: Callable[[Path], Daemon]
) -> None:
    a, b, first = await leader_then_standby(control, pair, daemons)
    a.signal(signal.SIGSTOP)
    try:
        await control.node_action("sweep-1", "preempt")
        await wait_for(lambda: replaced(control, pair, first[1][1]), SLOW, "sweep-1 replaced")
        assert await pair.leader_pid() == b.pid
        resumed_at = time.time()
    finally:
        a.signal(signal.SIGCONT)

    async def a_stood_down() -> bool:
        code, text = await http(pair.ports[0], "/healthz")
        return code == 200 and text.strip() == "ok: standby"

    await wait_for(a_stood_down, SLOW, "A standing by after it resumed")
    await asyncio.sleep(LEASE_S)  # a few of A's ticks and lease attempts, had it gone on
    assert mutations(await control.requests(since=resumed_at)) == []
    live = await ready(control, pair)
    assert live is not None
    assert len(ours(await control.nodes())) == 3
    assert await pair.leader_pid() == b.pid
    _, metrics = await http(pair.ports[0], "/metrics")
    assert "tpucared_leader 0.0" in metrics
    log = a.log_path.read_text(encoding="utf-8", errors="replace")
    assert "lease.lost" in log
    for daemon in (a, b):
        daemon.signal(signal.SIGTERM)
    assert [await a.wait(30), await b.wait(30)] == [0, 0]


SEED = 15
ROUNDS = 4


async def test_seeded_kills_of_either_daemon_with_api_faults(
    control: Control, pair: Pair, daemons: Callable[[Path], Daemon]
) -> None:
    """Kill -9 the leader or the standby, round after round (seeded), with a preemption now and
    then and 10% of node requests failing: after each round the fleet converges with no
    leaked or duplicate node, and no counter (slot counters, epoch, event ids) goes back."""
    rng = random.Random(SEED)
    a, b, _ = await leader_then_standby(control, pair, daemons)
    running = {0: a, 1: b}
    await control.faults(
        {"error_rate": 0.1, "kinds": ["unavailable", "internal"], "seed": SEED, "paths": ["nodes"]}
    )
    last: list[int] = []
    for round_ in range(ROUNDS):
        leader = await pair.leader_pid()
        victim = rng.choice([0, 1])
        if rng.random() < 0.5:
            await control.node_action(f"sweep-{rng.randrange(3)}", "preempt")
        await asyncio.sleep(rng.uniform(0, LEASE_S))
        await running[victim].kill()
        role = "the leader" if running[victim].pid == leader else "the standby"
        running[victim] = await daemons(pair.configs[victim]).start()
        what = f"round {round_}: converged after a kill -9 of {role}"
        await wait_for(lambda: ready(control, pair), 2 * SLOW, what)
        await wait_for(pair.leader_pid, SLOW, f"round {round_}: a leader")
        await wait_for(partial(healthy, pair.ports[victim]), SLOW, "the restarted daemon up")
        counters = await pair.rows(
            "SELECT (SELECT coalesce(sum(preemptions), 0) FROM slots), "
            "(SELECT coalesce(sum(failures), 0) FROM slots), "
            "(SELECT epoch FROM leader_lease), (SELECT max(id) FROM events)"
        )
        now = [int(x) for x in counters[0]]
        assert all(n >= p for n, p in zip(now, last, strict=False)), (round_, last, now)
        last = now
    await control.faults({})
    await wait_for(lambda: ready(control, pair), SLOW, "converged without faults")
    names = sorted(n["node_id"] for n in ours(await control.nodes()))
    assert names == ["sweep-0", "sweep-1", "sweep-2"]
    for daemon in running.values():
        daemon.signal(signal.SIGTERM)
    assert [await d.wait(30) for d in running.values()] == [0, 0]
