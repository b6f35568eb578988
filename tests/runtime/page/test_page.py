"""The page (tpucared/runtime/page/) in process, on the daemon's real HTTP server and a real store:
its slot table's filters at 10,000 slots (the ledger bench's fleet, filled directly), the
token gate (401 without it, the ssh -L answer beyond loopback), hostile text escaped, and its
templates and assets found as package data (what the wheel ships)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import tomllib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from config_support import daemon, load, problems

from bench import ledger as bench_ledger
from tpucared.core.ledger.categories import CATEGORIES
from tpucared.core.ledger.cost import Prices
from tpucared.runtime.clock import SystemClock
from tpucared.runtime.errors import StartupError
from tpucared.runtime.page import Gate, Page
from tpucared.runtime.telemetry.endpoints import Telemetry
from tpucared.runtime.telemetry.metrics import DaemonMetrics
from tpucared.runtime.telemetry.server import Health, HttpServer, start_http, store_status
from tpucared.store import Store

REPO = Path(__file__).resolve().parents[3]
SLOTS = 10_000
TOKEN = "s3cret-token-for-tests"
HOSTILE = '<img src=x onerror="alert(1)"><b>bold</b>'


def test_templates_and_assets_ship_as_package_data() -> None:
    """Every template and asset is found by importlib.resources and matched by pyproject's
    package-data (what the wheel includes)."""
    root = resources.files("tpucared.runtime.page")
    found = [f"templates/{p.name}" for p in root.joinpath("templates").iterdir()]
    found += [f"static/{p.name}" for p in root.joinpath("static").iterdir()]
    assert {"templates/base.html", "templates/slot.html", "static/page.js"} <= set(found)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["tpucared"]
    for name in found:
        path = f"runtime/page/{name}"
        assert any(fnmatch(path, g) for g in globs), f"{path} is not in the wheel's package-data"
    deps = pyproject["project"]["dependencies"]
    assert any(d.startswith("jinja2") for d in deps)


def test_every_ledger_category_has_a_colour() -> None:
    css = resources.files("tpucared.runtime.page").joinpath("static", "page.css").read_text()
    for category in CATEGORIES:
        assert f".cat-{category.value} {{" in css, category


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10,000 slots in 10 fleets (bench/ledger.py's history, two days), then varied by SQL:
    every third slot's newest node in zone z-b, every seventh dead; one hostile event."""
    path = tmp_path_factory.mktemp("page") / "state.db"
    now = datetime.now(UTC)
    asyncio.run(bench_ledger.template(path, now - timedelta(days=2), now))
    bench_ledger.copy_slots(path, SLOTS)
    con = sqlite3.connect(path)
    newest = "id IN (SELECT max(id) FROM nodes GROUP BY fleet, slot)"
    con.execute(f"UPDATE nodes SET zone = 'z-b' WHERE {newest} AND slot % 3 = 1")
    con.execute(f"UPDATE nodes SET phase = 'dead' WHERE {newest} AND slot % 7 = 0")
    con.execute(
        "INSERT INTO events (at, kind, message, fleet, slot, node, details) "
        "VALUES (?, 'test.hostile', ?, 'f0', 1, 'f0-1', '{}')",
        (now.isoformat(), HOSTILE),
    )
    con.commit()
    con.close()
    return path


async def _serve(db: Path, gate: Gate | None) -> AsyncIterator[tuple[HttpServer, Page]]:
    async with Store.open(db) as store:
        status = store_status(store)
        page = Page(store, status, lambda: datetime.now(UTC), "/etc/tpucared/fleet.toml", Prices())
        server = await start_http(
            "127.0.0.1", 0, health=Health(30.0), metrics=DaemonMetrics(), status=status,
            page=page, gate=gate,
        )  # fmt: skip
        try:
            yield server, page
        finally:
            await page.stop()
            await server.stop()


@pytest.fixture
async def served(big_db: Path) -> AsyncIterator[tuple[HttpServer, Page]]:
    async for pair in _serve(big_db, Gate(None, False, "127.0.0.1:0")):
        yield pair


async def _get(url: str, **kw: Any) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url, allow_redirects=False, **kw) as r:
        return r.status, await r.text()


def _count(db: Path, where: str) -> int:
    con = sqlite3.connect(db)
    try:
        sql = (
            "SELECT count(*) FROM slots s JOIN nodes n ON n.id = (SELECT max(id) FROM nodes "
            f"WHERE fleet = s.fleet AND slot = s.slot) WHERE {where}"
        )
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


async def test_the_slot_filters_answer_within_a_second_at_10000_slots(
    served: tuple[HttpServer, Page], big_db: Path
) -> None:
    server, page = served
    # Today's ledger is summed in the background (seconds at this size): timed apart.
    page.ledger.wanted()
    await asyncio.wait_for(page.ledger.refreshed.wait(), 60)
    cases = {
        "": "1 = 1",
        "state=dead": "n.phase = 'dead'",
        "zone=z-b": "n.zone = 'z-b'",
        "fleet=f3&state=dead&zone=z-b": "s.fleet = 'f3' AND n.phase = 'dead' AND n.zone = 'z-b'",
        "sort=uptime&desc=1&offset=9000": "1 = 1",
    }
    async with aiohttp.ClientSession() as session:
        for query, where in cases.items():
            started = time.monotonic()
            async with session.get(f"{server.url}/v1/slots?{query}") as r:
                doc = await r.json()
            took = time.monotonic() - started
            assert r.status == 200, doc
            assert doc["total"] == _count(big_db, where), query
            assert took < 1.0, f"/v1/slots?{query} took {took:.2f}s"
            assert len(doc["slots"]) == min(50, doc["total"] - doc["offset"])
        started = time.monotonic()
        async with session.get(f"{server.url}/slots?state=dead&zone=z-b") as r:
            html = await r.text()
        assert r.status == 200
        assert time.monotonic() - started < 1.0
        assert 'data-state="dead"' in html
        assert 'data-state="ready"' not in html
        # "Lost more than N minutes today": today's ledger, summed in the background.
        today = page.ledger.today
        assert today is not None
        # Half of today so far, at most 30 min: the history loses time since 18 h ago.
        minutes = min(30.0, (today.as_of - today.since).total_seconds() / 120)
        lost = {k for k, d in today.slots.items() if d.lost_s > minutes * 60 and k[0] == "f2"}
        started = time.monotonic()
        url = f"{server.url}/v1/slots?fleet=f2&lost_min={minutes}&limit=500"
        async with session.get(url) as r:
            doc = await r.json()
        assert time.monotonic() - started < 1.0
        assert doc["total"] == len(lost), doc["total"]
        assert 0 < len(lost) <= 1000
        assert {(s["fleet"], s["slot"]) for s in doc["slots"]} == set(sorted(lost)[:500])
        assert all(s["lost_today_s"] > minutes * 60 for s in doc["slots"])
    assert _count(big_db, "1 = 1") == SLOTS


async def test_hostile_text_is_escaped(served: tuple[HttpServer, Page]) -> None:
    server, _ = served
    status, html = await _get(f"{server.url}/slots/f0/1")
    assert status == 200, html
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;&lt;b&gt;bold&lt;/b&gt;" in html
    assert HOSTILE not in html


async def test_a_token_is_needed_when_configured(
    big_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TPUCARED_PAGE_TOKEN", TOKEN)
    gate = Gate.from_config("0.0.0.0", 9464, "TPUCARED_PAGE_TOKEN")
    async for server, _ in _serve(big_db, gate):
        for path in ("/", "/slots", "/v1/slots", "/v1/overview", "/v1/status", "/static/page.js"):
            assert (await _get(server.url + path))[0] == 401, path
            bad = {"Authorization": "Bearer wrong"}
            assert (await _get(server.url + path, headers=bad))[0] == 401, path
            good = {"Authorization": f"Bearer {TOKEN}"}
            assert (await _get(server.url + path, headers=good))[0] == 200, path
        assert (await _get(server.url + "/healthz"))[0] in (200, 503)
        assert (await _get(server.url + "/metrics"))[0] == 200
        # A browser: /?token= once sets a cookie and leaves the URL without it (unsafe: the
        # client's jar otherwise keeps no cookie of an IP address; browsers do).
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
            async with s.get(f"{server.url}/slots?state=dead&token={TOKEN}") as r:
                assert r.status == 200
                assert r.url.query.get("token") is None
                assert r.url.query.get("state") == "dead"
            async with s.get(f"{server.url}/v1/overview") as r:
                assert r.status == 200
            status, text = await _get(f"{server.url}/?token=wrong")
            assert status == 401
            assert TOKEN not in text


async def test_beyond_loopback_without_a_token_the_page_says_how_to_use_ssh(big_db: Path) -> None:
    async for server, _ in _serve(big_db, Gate.from_config("0.0.0.0", 9464, None)):
        for path in ("/", "/slots/f0/1", "/v1/slots"):
            status, text = await _get(server.url + path)
            assert status == 403, path
            assert "ssh -L 9464:127.0.0.1:9464" in text, path
        assert (await _get(server.url + "/v1/status"))[0] == 200  # as before the page


def test_a_token_env_that_is_unset_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TPUCARED_NO_SUCH_TOKEN", raising=False)
    with pytest.raises(Exception, match="TPUCARED_NO_SUCH_TOKEN is unset or empty"):
        Gate.from_config("127.0.0.1", 9464, "TPUCARED_NO_SUCH_TOKEN")


def test_the_token_env_is_a_variable_name_in_the_config(tmp_path: Path) -> None:
    config = load(tmp_path, daemon('http_token_env = "TPUCARED_PAGE_TOKEN"'))
    assert config.daemon.http_token_env == "TPUCARED_PAGE_TOKEN"
    assert load(tmp_path, daemon("")).daemon.http_token_env is None
    wrong = problems(tmp_path, daemon('http_token_env = "not a name; $(x)"'))
    assert len(wrong) == 1
    assert wrong[0].startswith("daemon.http_token_env")


async def test_the_daemon_does_not_start_when_its_token_variable_is_unset(
    tmp_path: Path, big_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TPUCARED_UNSET_TOKEN", raising=False)
    config = load(tmp_path, daemon('http_token_env = "TPUCARED_UNSET_TOKEN"'))
    async with Store.open(big_db) as store:
        telemetry = Telemetry(config, store, SystemClock())
        with pytest.raises(StartupError, match=r"\$TPUCARED_UNSET_TOKEN is unset or empty"):
            await telemetry.start()
        await telemetry.stop()
