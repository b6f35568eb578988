"""The real daemon (`python -m tpucared run`) against a hostile TPU API: never act on what you
don't understand.

Six READY nodes of ours, made by the daemon; then every node list the daemon sends meets one
mode of the emulator's `malformed` fault (emulator/hostile.py) for several ticks. While it
lasts and after: no delete and no create reaches the cloud, no slot counts a preemption, and
the same six nodes are READY and live in the database once the API makes sense again. A list
the daemon cannot read is told to a person (one notice for the zone); a node whose state it
cannot read is told once by name, with what the API sent, and otherwise left alone.

The fault is on GETs only: a delete or a create the daemon sent would really happen, so the
assertions are on the cloud, not just on what the daemon says. `slow_headers` stalls each
list for 2 s: past the list's deadline in a tick (runtime/nodes/observer.py), so the zone is
unknown for the tick; the HTTP read timeout itself is tests/gcp/test_gcp_hostile.py's. Whatever
the mode, the broken zone is asked less and less often (its list backoff): the requests a
window holds are bounded by the backoff's schedule, not by the ticks.

The same, leaner, for a Compute Engine fleet's instance list (two VMs, four modes): an
instance status nobody knows deletes nothing (one notice per VM), and a list it cannot read
(a TERMINATED twin, labels as a list, an error inside a 200) makes the zone unknown.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import (
    SLOW,
    ZONE,
    Control,
    Daemon,
    compute_converged,
    compute_fleet,
    compute_instances,
    converged,
    free_port,
    ours,
    query,
    short,
    wait_for,
    write_config,
)

from bench import daemon_config
from tpucared.gcp.retry import RetryPolicy

pytestmark = pytest.mark.slow

Daemons = Callable[[Path], Daemon]
SIZE = 6
# Ticks that start and end while the fault is on (one more is awaited: a tick may have been
# listing when it was switched on).
TICKS = 3
POLL_S = 0.3  # write_config's default poll
VALUE = "SOMETHING_NEW"

MODES: list[tuple[str, dict[str, Any]]] = [
    ("not_json", {}),
    ("deep_json", {}),
    ("error_envelope", {}),
    ("redirect", {}),
    ("labels_list", {}),
    ("state", {"value": VALUE}),
    ("duplicate", {}),
    ("endless_pages", {}),
    ("slow_headers", {"delay_s": 2}),
]
# Modes the daemon sees as a zone it cannot list (MALFORMED): a person is told.
UNREADABLE = {"not_json", "deep_json", "error_envelope", "redirect", "labels_list", "duplicate",
              "endless_pages"}  # fmt: skip


async def ticks(control: Control, port: int) -> int:
    """Completed ticks, from the daemon's /metrics (0 until it serves them)."""
    try:
        async with control.session.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    except OSError:
        return 0
    match = re.search(r"^tpucared_tick_seconds_count (\S+)$", text, re.MULTILINE)
    return int(float(match[1])) if match else 0


async def ticked(control: Control, port: int, count: int) -> int:
    """Wait until `count` ticks have completed; the number completed."""

    async def enough() -> int:
        done = await ticks(control, port)
        return done if done >= count else 0

    result: int = await wait_for(enough, SLOW, f"{count} completed ticks", every=0.2)
    return result


def acting(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Requests that change the cloud's nodes: deletes, and creates (of nodes or queued
    resources)."""
    return [
        r
        for r in requests
        if r["method"] == "DELETE"
        or (r["method"] == "POST" and r["path"].endswith(("/nodes", "/queuedResources")))
    ]


def most_lists(window: float, poll: float) -> int:
    """The most lists of a failing zone a window may hold: one in flight when it opened, then
    its backoff (core/planning/zone_health.py) from one poll, doubling, with a tick's slack."""
    count, at, wait = 2, 0.0, poll
    while at + wait - poll / 10 <= window:
        at, wait, count = at + wait, wait * 2, count + 1
    return count


def preemptions(db: Path) -> dict[int, int]:
    return {r["slot"]: r["preemptions"] for r in query(db, "SELECT * FROM slots")}


def notices(db: Path) -> list[dict[str, Any]]:
    return [dict(r) for r in query(db, "SELECT * FROM events WHERE kind = 'notice' ORDER BY id")]


@pytest.mark.parametrize(("mode", "fields"), MODES, ids=[m for m, _ in MODES])
async def test_a_hostile_api_makes_the_daemon_act_on_nothing(
    tmp_path: Path, control: Control, daemons: Daemons, mode: str, fields: dict[str, Any]
) -> None:
    db = tmp_path / "state.db"
    port = free_port()
    daemon = await daemons(
        write_config(tmp_path, control.emulator.url, size=SIZE, http_port=port)
    ).start()
    await wait_for(lambda: converged(control, db, SIZE), SLOW, f"{SIZE} READY nodes")
    nodes = {short(n): n["node"]["id"] for n in ours(await control.nodes())}
    counted = preemptions(db)
    assert sorted(counted) == list(range(SIZE))
    told_before = len(notices(db))

    # The fault, on every node GET, for several ticks.
    start = await ticked(control, port, 1)
    on = time.time()
    await control.faults(
        {
            "error_rate": 1.0,
            "kinds": ["malformed"],
            "mode": mode,
            **fields,
            "paths": ["/nodes"],
            "methods": ["GET"],
        }
    )
    during_started = time.monotonic()
    await ticked(control, port, start + TICKS + 1)
    off = time.time()
    await control.faults({})
    seconds = time.monotonic() - during_started

    during = [r for r in await control.requests(on) if r["time"] < off]
    hit = [r for r in during if r["fault"] == "malformed"]
    assert len(hit) >= 2, (mode, len(hit))  # the daemon met the fault, and again
    # ... but asked the broken zone less and less often (its list backoff), not every tick.
    # (Each list may retry its first page: up to the client's attempts, within its deadline.)
    firsts = [
        r
        for r in during
        if r["method"] == "GET" and r["path"].endswith("/nodes") and "pageToken" not in r["query"]
    ]
    window = off - on
    most = most_lists(window, POLL_S) * RetryPolicy().max_attempts
    assert len(firsts) <= most, (mode, window, len(firsts))
    per_minute = len(during) / window * 60
    assert acting(during) == [], f"{mode}: the daemon acted while the API made no sense"
    assert preemptions(db) == counted

    # Once the API makes sense again: the same nodes, READY, nothing deleted or created since.
    now_ticks = await ticks(control, port)
    await ticked(control, port, now_ticks + 2)
    await wait_for(lambda: converged(control, db, SIZE), SLOW, "the same fleet, READY")
    assert {short(n): n["node"]["id"] for n in ours(await control.nodes())} == nodes
    assert acting(await control.requests(on)) == []
    assert preemptions(db) == counted
    assert daemon.process is not None
    assert daemon.process.returncode is None

    told = notices(db)[told_before:]
    if mode in UNREADABLE:
        zone = [n for n in told if n["message"].startswith(f"listing {ZONE} fails (malformed")]
        assert len(zone) == 1, told  # a person is told, once
    if mode == "state":
        # One notice per node, naming it and what the API sent; nothing else done to it.
        for name in nodes:
            about = [n for n in told if n["node"] == name and VALUE in n["message"]]
            assert len(about) == 1, (name, told)
    print(
        f"{mode}: {len(hit)} faulted lists over {TICKS + 1} ticks in {seconds:.1f} s, "
        f"{len(during)} requests in all ({per_minute:.0f} a minute)"
    )


# ---------------------------------------------------------------------------------------------
# The same on a Compute Engine fleet's instance list (emulator/hostile.py applies its list
# modes to `instances` too): lean, a few modes and two VMs.

IRON = 2
COMPUTE_MODES: list[tuple[str, dict[str, Any]]] = [
    ("state", {"value": VALUE}),  # every instance's status one nobody knows
    ("duplicate", {}),  # a TERMINATED twin of an instance of ours
    ("labels_list", {}),
    ("error_envelope", {}),
]


def compute_acting(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Requests that change the cloud's instances: deletes and inserts."""
    return [
        r
        for r in requests
        if r["method"] == "DELETE" or (r["method"] == "POST" and r["path"].endswith("/instances"))
    ]


async def vms(control: Control) -> dict[str, str]:
    return {i["name"]: i["instance"]["id"] for i in await compute_instances(control, "iron")}


@pytest.mark.parametrize(("mode", "fields"), COMPUTE_MODES, ids=[m for m, _ in COMPUTE_MODES])
async def test_a_hostile_instance_list_makes_the_daemon_act_on_nothing(
    tmp_path: Path, control: Control, daemons: Daemons, mode: str, fields: dict[str, Any]
) -> None:
    db = tmp_path / "state.db"
    port = free_port()
    text = daemon_config.against_emulator(
        control.emulator.url, compute_fleet("iron", IRON), daemon={"http": f"127.0.0.1:{port}"}
    )
    await daemons(daemon_config.write(tmp_path / "fleet.toml", text)).start()
    await wait_for(lambda: compute_converged(control, db, IRON, "iron"), SLOW, "2 RUNNING VMs")
    before = await vms(control)
    counted = preemptions(db)
    told_before = len(notices(db))

    start = await ticked(control, port, 1)
    on = time.time()
    await control.faults(
        {"error_rate": 1.0, "kinds": ["malformed"], "mode": mode, **fields,
         "paths": ["/instances"], "methods": ["GET"]}
    )  # fmt: skip
    await ticked(control, port, start + TICKS + 1)
    off = time.time()
    await control.faults({})

    during = [r for r in await control.requests(on) if r["time"] < off]
    assert len([r for r in during if r["fault"] == "malformed"]) >= 2, mode
    assert compute_acting(during) == [], f"{mode}: the daemon acted on a list it cannot read"
    assert preemptions(db) == counted

    # Once the list makes sense again: the same VMs, RUNNING, nothing deleted or made since.
    await ticked(control, port, await ticks(control, port) + 2)
    await wait_for(lambda: compute_converged(control, db, IRON, "iron"), SLOW, "the same VMs")
    assert await vms(control) == before
    assert compute_acting(await control.requests(on)) == []
    assert preemptions(db) == counted
    told = notices(db)[told_before:]
    if mode == "state":
        # An unreadable status deletes nothing: one notice per VM, with what the API sent.
        for name in before:
            about = [n for n in told if n["node"] == name and VALUE in n["message"]]
            assert len(about) == 1, (name, told)
    else:
        zone = [n for n in told if n["message"].startswith(f"listing {ZONE} fails (malformed")]
        assert len(zone) == 1, told
