"""API health as a recorded fact: the real daemon against the emulator failing its lists, and
against a port where nothing listens. Each failed list of a zone is counted in `zone_health`;
the third in a row tells `zone.unreachable` (once), `status` and /v1/status show the zone and
its error, /healthz answers 503 while no zone of the fleet can be listed, and the first list
that succeeds again tells `zone.reachable` and makes /healthz 200 again. Plus the pure rules
(`next_zone_health`, `unlistable_fleets`, `Health`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from runtime_support import (
    PROJECT,
    SLOW,
    ZONE,
    Control,
    Daemon,
    free_port,
    query,
    wait_for,
    write_config,
)
from test_commands import tpucared

from tpucared.core.model.observed import ZoneObservation
from tpucared.core.model.specs import ErrorKind, FleetSpec
from tpucared.core.planning.zone_health import (
    LIST_BACKOFF_CAP_S,
    UNREACHABLE_AFTER,
    list_backoff,
    listed_now,
    next_zone_health,
    unlistable_fleets,
)
from tpucared.runtime.telemetry.server import Health
from tpucared.store.snapshot import ZoneHealth, error_text

Daemons = Callable[[Path], Daemon]
T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


# -- the rules -----------------------------------------------------------------------------------


def _failed(at: datetime, zone: str = "z") -> ZoneObservation:
    return ZoneObservation(zone, at, error=ErrorKind.TRANSIENT, error_message="refused")


def test_a_failing_zone_is_listed_again_after_a_backoff_doubling_from_one_poll() -> None:
    assert [list_backoff(n, 10.0) for n in range(6)] == [0.0, 10.0, 20.0, 40.0, 80.0, 160.0]
    assert list_backoff(9, 10.0) == LIST_BACKOFF_CAP_S
    assert list_backoff(99, 600.0) == 600.0  # never below one poll
    health = None
    for i in range(3):  # three failed lists, each started at T0 + i s
        health, _ = next_zone_health(
            health, _failed(T0 + timedelta(seconds=i)), "p", None, poll_interval=10.0
        )
    assert health is not None
    assert health.next_list_at == T0 + timedelta(seconds=2 + 40)
    slack = timedelta(seconds=1)
    assert not listed_now(health, T0 + timedelta(seconds=30), slack)
    assert listed_now(health, T0 + timedelta(seconds=41.5), slack)  # the poll's own tick
    ok, _ = next_zone_health(health, ZoneObservation("z", T0 + timedelta(seconds=45)), "p", None)
    assert ok.next_list_at is None
    assert listed_now(ok, T0, slack)  # a good list resets it
    assert listed_now(None, T0, slack)


def test_failures_are_counted_and_unreachable_is_told_once_per_outage() -> None:
    health, events = None, []
    for i in range(5):
        health, event = next_zone_health(health, _failed(T0 + timedelta(seconds=i)), "p", T0)
        events.append(event and event[0])
    assert events == [None, None, "zone.unreachable", None, None]
    assert health is not None
    assert (health.failures, health.unreachable, health.failing_since) == (5, True, T0)
    assert (health.error_kind, health.error_message, health.last_ok_at) == (
        ErrorKind.TRANSIENT,
        "refused",
        T0,
    )
    ok = ZoneObservation("z", T0 + timedelta(minutes=1))
    after, event = next_zone_health(health, ok, "p", None)
    assert event is not None
    assert event[0] == "zone.reachable"
    assert after == ZoneHealth("p", "z", last_ok_at=ok.observed_at)
    # Listing fine again and again changes nothing: no write.
    assert next_zone_health(after, ZoneObservation("z", T0 + timedelta(minutes=2)), "p", None) == (
        after,
        None,
    )


def test_the_error_names_its_kind_once() -> None:
    assert error_text(ErrorKind.TRANSIENT, "transient: refused (GET /x)") == (
        "transient: refused (GET /x)"
    )
    assert error_text(ErrorKind.TRANSIENT, "refused") == "transient: refused"
    assert error_text(ErrorKind.TRANSIENT, None) == "transient"
    assert error_text(None, None) == "-"


def test_a_short_failure_recovers_without_events() -> None:
    health, _ = next_zone_health(None, _failed(T0), "p", None)
    after, event = next_zone_health(health, ZoneObservation("z", T0), "p", None)
    assert (after.failures, event) == (0, None)


def test_a_fleet_is_down_only_when_every_zone_is_unreachable() -> None:
    spec = FleetSpec("f", ("a", "b"), "v4-8", 1, {"runtime_version": "rt"})
    down = ZoneHealth("p", "a", failures=3, unreachable=True)
    assert unlistable_fleets([spec], {("", "a"): down}) == []
    assert unlistable_fleets([spec], {("", "a"): down, ("", "b"): ZoneHealth("p", "b")}) == []
    b = ZoneHealth("p", "b", failures=4, unreachable=True)
    assert unlistable_fleets([spec], {("", "a"): down, ("", "b"): b}) == [("f", (down, b))]
    # The same zones in another project say nothing about this fleet's.
    assert unlistable_fleets([spec], {("q", "a"): down, ("q", "b"): b}) == []


def test_health_fails_with_the_reason_while_zones_are_down() -> None:
    now = [0.0]
    health = Health(30.0, clock=lambda: now[0])
    health.tick()
    assert health.check() == (True, "ok")
    health.set_zones_down("fleet f: no zone can be listed")
    assert health.check() == (False, "fleet f: no zone can be listed")
    health.set_zones_down(None)
    assert health.check() == (True, "ok")


# -- the real daemon -----------------------------------------------------------------------------


async def _healthz(port: int) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/healthz") as resp,
    ):
        return resp.status, await resp.text()


async def _status(port: int) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/v1/status") as resp,
    ):
        return dict(await resp.json())


def _events(db: Path, kind: str) -> list[Any]:
    if not db.exists():
        return []
    try:
        return query(db, "SELECT * FROM events WHERE kind = ?", kind)
    except Exception:  # the daemon has not migrated the file yet
        return []


async def _zone_metrics(port: int) -> dict[str, float]:
    """The zone families of /metrics: {"failures": ..., "unreachable": ...} for ZONE."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        text = await resp.text()
    out = {}
    for line in text.splitlines():
        for family, key in (
            ("tpucared_zone_list_failures", "failures"),
            ("tpucared_zone_unreachable", "unreachable"),
        ):
            if line.startswith(f'{family}{{zone="{ZONE}"}} '):
                out[key] = float(line.split()[-1])
    return out


async def _answers(port: int, status: int) -> tuple[int, str] | None:
    try:
        got = await _healthz(port)
    except aiohttp.ClientError:
        return None
    return got if got[0] == status else None


@pytest.mark.slow
async def test_an_endpoint_where_nothing_listens_is_told_shown_and_unhealthy(
    tmp_path: Path, daemons: Daemons
) -> None:
    db, port = tmp_path / "state.db", free_port()
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = write_config(tmp_path, endpoint, http_port=port)
    await daemons(config).start()

    async def told() -> list[Any]:
        return _events(db, "zone.unreachable")

    (event,) = await wait_for(told, 2 * SLOW, "zone.unreachable")
    assert ZONE in event["message"]
    assert "127.0.0.1" in event["message"], event["message"]
    assert "transient: transient" not in event["message"]  # the kind is named once
    details = json.loads(event["details"])
    assert (details["project"], details["zone"]) == (PROJECT, ZONE)
    assert details["failures"] == UNREACHABLE_AFTER

    _code, reason = await wait_for(lambda: _answers(port, 503), SLOW, "/healthz 503")
    assert "sweep" in reason, reason
    assert ZONE in reason, reason

    doc = await _status(port)
    (zone,) = doc["zones"]
    assert (zone["project"], zone["zone"], zone["unreachable"]) == (PROJECT, ZONE, True)
    assert zone["failed_lists"] >= UNREACHABLE_AFTER
    assert "127.0.0.1" in zone["error_message"]
    assert doc["fleets"][0]["failing_zones"] == [ZONE]
    zone_metrics = await _zone_metrics(port)
    assert zone_metrics["unreachable"] == 1
    assert zone_metrics["failures"] >= UNREACHABLE_AFTER

    rc, out, err = await tpucared("status", "-c", str(config))
    assert rc == 0, err
    assert f"zone {ZONE}: unreachable" in out, out
    assert "listing" in out  # the slots' LAST ERROR names the zone's failure
    (row,) = query(db, "SELECT * FROM zone_health")
    assert row["failures"] >= UNREACHABLE_AFTER
    assert row["unreachable"] == 1
    assert len(_events(db, "zone.unreachable")) == 1  # once per outage


@pytest.mark.slow
async def test_failing_lists_then_listing_again(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    db, port = tmp_path / "state.db", free_port()
    # 403 on every list: not retried by the client, so each tick fails at once.
    await control.faults(
        {"error_rate": 1.0, "kinds": ["permission"], "paths": ["nodes"], "methods": ["GET"]}
    )
    await daemons(write_config(tmp_path, control.emulator.url, http_port=port)).start()

    async def told() -> list[Any]:
        return _events(db, "zone.unreachable")

    (event,) = await wait_for(told, SLOW, "zone.unreachable")
    assert "permission" in event["message"], event["message"]
    await wait_for(lambda: _answers(port, 503), SLOW, "/healthz 503")

    await control.faults({})

    async def reachable() -> list[Any]:
        return _events(db, "zone.reachable")

    await wait_for(reachable, SLOW, "zone.reachable")
    await wait_for(lambda: _answers(port, 200), SLOW, "/healthz 200 again")
    (row,) = query(db, "SELECT * FROM zone_health")
    assert (row["failures"], row["unreachable"], row["error_kind"]) == (0, 0, None)
    assert (await _status(port))["zones"] == []
    assert await _zone_metrics(port) == {"failures": 0, "unreachable": 0}
    assert len(_events(db, "zone.unreachable")) == 1


@pytest.mark.slow
async def test_plan_exits_1_when_no_zone_can_be_listed(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = write_config(tmp_path, endpoint, zones=(ZONE, "us-east1-d"))
    rc, out, err = await tpucared("plan", "-c", str(config))
    assert rc == 1, (out, err)
    # The last line (the log lines of the failed requests come first).
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"tpucared plan: no zone could be listed ({ZONE}, us-east1-d): ")
    assert "127.0.0.1" in line, line
    assert out  # the plan is still shown


def test_a_plan_with_one_zone_listed_is_not_blind() -> None:
    from tpucared.cli.plan import blind_reason

    failed = _failed(T0, "a")
    assert blind_reason([failed, ZoneObservation("b", T0)]) is None
    assert blind_reason([]) is None
    assert blind_reason([failed]) == "no zone could be listed (a): a: transient: refused"
