"""Two real daemons (`python -m tpucared run`) on one PostgreSQL and the emulator: one leads,
the other stands by (healthy, serving its role), and takes over when the leader is killed
(kill -9) or paused (SIGSTOP); a paused leader that resumes after losing the lease makes no
cloud call that creates or deletes, and stands by. The database is read with `psql`, the
cloud through the emulator's control API and request log."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from leader_support import (
    LEASE_S,
    POLL_S,
    SLACK_S,
    Pair,
    healthy,
    http,
    leader_then_standby,
    mutations,
    ready,
    replaced,
)
from runtime_support import SLOW, Control, Daemon, ours, wait_for

pytestmark = pytest.mark.slow


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
