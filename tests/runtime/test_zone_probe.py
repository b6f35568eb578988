"""A zone that answers again is seen within 30 s however long its lists failed, at no more
requests per failing minute than the 5-minute backoff cost (issue 44).

The daemon's parts in this process against the emulator, on a `ManualClock`: the daemon's
clock, not the wall's, makes a long outage short (a 5-minute outage is 30 ticks run back to
back). The emulator's hostile modes fail the zone's node lists (endless page tokens, 503s);
its request log counts what the outage cost. The figure to beat is the rule before: a list
after a backoff doubling from one poll to 5 minutes (`list_backoff(bounded=False)`, still the
rule for a zone never listed well), each list as long as the first failed one (retried, or
200 pages of endless tokens). Plus the pure rules (`list_backoff`, `page_bound`, `list_terms`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runtime_support import PROJECT, ZONE, Control, write_config

from tpucared.config import load_config
from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.specs import ErrorKind
from tpucared.core.planning.zone_health import (
    LIST_BACKOFF_CAP_S,
    PROBE_CAP_S,
    list_backoff,
    list_terms,
    next_zone_health,
    page_bound,
)
from tpucared.core.vocab.plan import Plan
from tpucared.gcp import NoAuth
from tpucared.gcp.rest import MAX_LIST_PAGES
from tpucared.gcp.tpu import TpuClient, TpuCloud
from tpucared.runtime.clock import ManualClock
from tpucared.runtime.daemon import Daemon
from tpucared.runtime.nodes.calls import NodeTemplate
from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head

POLL_S = 10.0
SEEN_WITHIN_S = 30.0
T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


# -- the rules -----------------------------------------------------------------------------------


def test_a_zone_whose_lists_are_bounded_backs_off_to_30_s_and_the_others_to_5_minutes() -> None:
    assert [list_backoff(n, POLL_S, bounded=True) for n in range(5)] == [0, 10, 20, 30, 30]
    assert list_backoff(99, POLL_S, bounded=True) == PROBE_CAP_S
    assert list_backoff(99, POLL_S) == LIST_BACKOFF_CAP_S
    assert list_backoff(99, 60.0, bounded=True) == 60.0  # never below one poll
    failed = ZoneObservation("z", T0, error=ErrorKind.TRANSIENT, error_message="503")
    health, _ = next_zone_health(None, failed, "p", None, poll_interval=POLL_S, bounded=True)
    for _ in range(20):
        health, _ = next_zone_health(health, failed, "p", None, poll_interval=POLL_S, bounded=True)
    assert health.next_list_at == T0 + timedelta(seconds=PROBE_CAP_S)


def test_a_list_stops_at_ten_times_the_last_good_one_and_a_failing_zones_is_not_retried() -> None:
    assert page_bound(None) is None  # not known: the client's 200 pages
    assert [page_bound(n) for n in (0, 1, 3, 19)] == [20, 20, 40, 200]
    failed = ZoneObservation("z", T0, error=ErrorKind.MALFORMED, error_message="endless")
    health, _ = next_zone_health(None, failed, "p", None, poll_interval=POLL_S)
    assert list_terms(None, 1) == (20, True)  # a zone listing fine: retried
    assert list_terms(health, 1) == (20, False)  # a failing one: a probe
    assert list_terms(health, None) == (None, False)


# -- the daemon against the emulator -------------------------------------------------------------


@dataclass
class Harness:
    daemon: Daemon
    clock: ManualClock
    control: Control

    async def tick(self) -> ZoneObservation:
        """One poll later, one tick: its observation of ZONE."""
        await self.clock.advance(POLL_S)
        tick = await self.daemon.reconciler.tick("poll")
        return next(o for o in tick.observations if o.zone == ZONE)

    async def zone_lists(self, since: float) -> list[dict[str, Any]]:
        path = f"/v2/projects/{PROJECT}/locations/{ZONE}/nodes"
        return [r for r in await self.control.requests(since) if r["path"] == path]


@contextlib.asynccontextmanager
async def harness(tmp_path: Path, control: Control) -> AsyncIterator[Harness]:
    """The daemon's parts on a manual clock; its plans carry nothing out (only lists matter)."""
    config = load_config(write_config(tmp_path, control.emulator.url, size=1, poll=f"{POLL_S:g}s"))
    await upgrade_to_head(config.daemon.db)
    store = Store.open(config.daemon.db)
    client = TpuClient(config.gcp.endpoint, token_source=NoAuth())
    template = NodeTemplate(PROJECT, {"ssh-keys": "tpucared:ssh-ed25519 AAAA tpucared"}, True)
    clock = ManualClock(T0)

    def nothing(plan: Plan) -> Plan:
        return replace(plan, actions=())

    try:
        clouds = {"tpu": TpuCloud(client)}
        daemon = Daemon(config, store, clouds, template, clock=clock, plan_filter=nothing)
        yield Harness(daemon, clock, control)
    finally:
        await client.aclose()
        await store.close()


def lists_before(outage_s: float) -> int:
    """Lists of a failing zone in `outage_s` under the rule before (a 5-minute backoff cap)."""
    at, n = 0.0, 0
    while at < outage_s:
        n += 1
        at += list_backoff(n, POLL_S)
    return n


@dataclass(frozen=True)
class Outage:
    failing_s: float  # from the first failed list to the zone answering again
    requests: int  # the zone's node list requests meanwhile
    first_list: int  # of which the first failed list's (retried, as every list was before)
    seen_after_s: float  # from the zone answering again to a tick listing it well

    def per_minute(self, requests: float) -> float:
        return requests / (self.failing_s / 60.0)


async def outage(h: Harness, fault: dict[str, Any], seconds: float) -> Outage:
    """The zone lists well, then its lists fail for `seconds` of the daemon's clock and until
    its next failed list (the worst case: it answers again just after one), then it answers."""
    assert (await h.tick()).ok
    wall = time.time()
    paths = [f"locations/{ZONE}/nodes"]
    await h.control.faults({"error_rate": 1.0, "methods": ["GET"], "paths": paths, **fault})
    failed_at = h.clock.monotonic()
    assert not (await h.tick()).ok
    first_list = len(await h.zone_lists(wall))
    while h.clock.monotonic() - failed_at + POLL_S < seconds:
        assert not (await h.tick()).ok
    asked = len(await h.zone_lists(wall))
    while len(await h.zone_lists(wall)) == asked:
        assert not (await h.tick()).ok
    await h.control.faults({})
    back = h.clock.monotonic()
    requests = len(await h.zone_lists(wall))
    while not (await h.tick()).ok:
        assert h.clock.monotonic() - back < LIST_BACKOFF_CAP_S
    seen = Outage(back - failed_at + POLL_S, requests, first_list, h.clock.monotonic() - back)
    print(f"{fault} for {seen.failing_s:g} s: {seen}, {seen.per_minute(requests):.1f}/min")
    return seen


async def test_endless_page_tokens_for_40_s_then_for_5_minutes(
    tmp_path: Path, control: Control
) -> None:
    endless = {"kinds": ["malformed"], "mode": "endless_pages"}
    async with harness(tmp_path, control) as h:
        short = await outage(h, endless, 40.0)
        long = await outage(h, endless, 300.0)
    for seen in (short, long):
        assert seen.seen_after_s <= SEEN_WITHIN_S
        # Stopped at ten times the last good list (1 page) and ten, not at 200 pages.
        assert seen.first_list == page_bound(1)
        # Before, each list ran to 200 pages.
        before = lists_before(seen.failing_s) * MAX_LIST_PAGES
        assert seen.per_minute(seen.requests) <= seen.per_minute(before) / 2


async def test_503s_for_5_minutes(tmp_path: Path, control: Control) -> None:
    async with harness(tmp_path, control) as h:
        seen = await outage(h, {"kinds": ["unavailable"]}, 300.0)
    assert seen.seen_after_s <= SEEN_WITHIN_S
    # The first failed list is retried as every list was before (3-6 requests within its 2 s
    # deadline); the probes that follow are one request each.
    assert seen.first_list >= 3
    assert seen.requests - seen.first_list <= seen.failing_s / POLL_S
    assert seen.requests <= lists_before(seen.failing_s) * seen.first_list
