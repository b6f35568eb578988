"""The page in a real browser (issue 43): Debian's chromium, driven headless by Selenium through
Debian's chromium-driver (docs/status.md "The page and its JSON" argues the choice), against the
real daemon keeping two spot nodes on the emulator. The page loads with no console error; a
preemption turns the slot's row and the slot's own view (timeline, incarnations) without a
reload (capacity held at zero so the slot stays down until it is given back), then back; an
event text with HTML in it renders as text. The overview and one slot are saved as the
screenshots the README shows (docs/page-overview.png, docs/page-slot.png); the test checks their
structure (the DOM), not their pixels. No chromium: the test fails, it does not skip."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from runtime_support import SLOW, Control, Daemon, converged, free_port, wait_for, write_config
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DOCS = Path(__file__).resolve().parents[3] / "docs"
HOSTILE = '<img src=x onerror="window.__pwned=1"><b>bold</b> & more'


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    return {**emulator_options, "create_seconds": 1.0, "delete_seconds": 0.5}


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,900", "--lang=en-US"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(SLOW)
    try:
        yield driver
    finally:
        driver.quit()


async def run(fn: Callable[..., Any], *args: Any) -> Any:
    """A blocking WebDriver call off the event loop (the emulator answers on this loop)."""
    return await asyncio.to_thread(fn, *args)


def console_errors(driver: webdriver.Chrome) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def row_state(driver: webdriver.Chrome, slot: str) -> str | None:
    """The row's state, read inside the page in one step: the page's poll redraws the table,
    so an element found in one call may be gone by the next (a stale reference)."""
    state = driver.execute_script(
        'const r = document.querySelector(`#slots tr[data-slot="${arguments[0]}"]`);'
        "return r ? r.getAttribute('data-state') : null;",
        slot,
    )
    return None if state is None else str(state)


async def test_the_page_follows_a_preemption_live_and_renders_text_as_text(
    tmp_path: Path, control: Control, daemons: Callable[[Path], Daemon], browser: webdriver.Chrome
) -> None:
    db, port = tmp_path / "state.db", free_port()
    config = write_config(tmp_path, control.emulator.url, size=2, http_port=port)
    await daemons(config).start()
    await wait_for(lambda: converged(control, db, 2), SLOW, "two READY nodes")
    con = sqlite3.connect(db, timeout=10)
    con.execute(
        "INSERT INTO events (at, kind, message, fleet, slot, node, details) "
        "VALUES (?, 'test.hostile', ?, 'sweep', 1, 'sweep-1', '{}')",
        (datetime.now(UTC).isoformat(), HOSTILE),
    )
    con.commit()
    con.close()
    base = f"http://127.0.0.1:{port}"

    # The overview: loads, no console error, the fleet's row; its screenshot.
    await run(browser.get, base + "/")
    fleet_rows = await run(browser.find_elements, By.CSS_SELECTOR, '#fleets tr[data-fleet="sweep"]')
    assert len(fleet_rows) == 1
    assert "ready 2" in fleet_rows[0].text

    async def headline() -> str:
        text = (await run(browser.find_element, By.ID, "ledger-headline")).text
        return "" if "being summed" in text else str(text)

    # Today's ledger comes in by a poll, without a reload.
    assert "lost" in await wait_for(headline, SLOW, "the ledger's headline")
    await run(browser.save_screenshot, str(DOCS / "page-overview.png"))

    # A preemption turns the slot's row (one tab) and the slot's own view (another) without a
    # reload, then back: capacity held at zero keeps the slot down until it is given back.
    await run(browser.get, base + "/slots/sweep/0")
    slot_tab = browser.current_window_handle
    await run(browser.switch_to.new_window, "tab")
    table_tab = browser.current_window_handle
    await run(browser.get, base + "/slots?fleet=sweep")
    assert await run(row_state, browser, "sweep/0") == "ready"
    for tab in (slot_tab, table_tab):
        await run(browser.switch_to.window, tab)
        await run(browser.execute_script, "window.__sameDocument = 42;")
    await control.capacity(0)
    await control.node_action("sweep-0", "preempt")

    async def row_is(want: Callable[[str | None], bool]) -> str | None:
        state = await run(row_state, browser, "sweep/0")
        return state if want(state) else None

    down = await wait_for(lambda: row_is(lambda s: s not in (None, "ready")), SLOW, "row down")
    assert down in ("dead", "deleting", "deleted", "requested", "creating", "failed")
    await run(browser.switch_to.window, slot_tab)

    async def slot_view_shows_the_loss() -> bool:
        try:
            badge = (await run(browser.find_element, By.ID, "state")).get_attribute("data-state")
            rects = await run(browser.find_elements, By.CSS_SELECTOR, "#timeline rect")
            drawn = {r.get_attribute("data-category") for r in rects}
            causes = (await run(browser.find_element, By.ID, "incarnations")).text
        except StaleElementReferenceException:
            return False  # redrawn by the page's poll between two calls: ask again
        recovery = "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION" in drawn
        return badge != "ready" and recovery and "preempted" in causes

    await wait_for(slot_view_shows_the_loss, SLOW, "the slot's view showing the loss")
    await control.capacity(None)

    async def badge_ready() -> bool:
        try:
            badge = await run(browser.find_element, By.ID, "state")
            return badge.get_attribute("data-state") == "ready"
        except StaleElementReferenceException:
            return False  # redrawn between the two calls: ask again

    await wait_for(badge_ready, SLOW, "the slot's view ready again")
    assert await run(browser.execute_script, "return window.__sameDocument;") == 42
    assert await run(console_errors, browser) == []
    await run(browser.switch_to.window, table_tab)
    await wait_for(lambda: row_is(lambda s: s == "ready"), SLOW, "row ready again")
    assert await run(browser.execute_script, "return window.__sameDocument;") == 42
    assert await run(console_errors, browser) == []

    # One slot: the loss in its timeline and incarnations, its commands to copy.
    await run(browser.get, base + "/slots/sweep/0?range=day")
    categories = {
        r.get_attribute("data-category")
        for r in await run(browser.find_elements, By.CSS_SELECTOR, "#timeline rect")
    }
    assert "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION" in categories or "capacity_wait" in categories
    fills = await run(
        browser.execute_script,
        "return [...document.querySelectorAll('#timeline rect')]"
        ".map(r => getComputedStyle(r).fill);",
    )
    assert fills, "no interval drawn"
    assert "rgb(153, 153, 153)" not in fills  # each category has its colour
    causes = (await run(browser.find_element, By.ID, "incarnations")).text
    assert "preempted" in causes
    assert "tpucared logs -c" in (await run(browser.find_element, By.ID, "cmd-logs")).text
    await run(browser.save_screenshot, str(DOCS / "page-slot.png"))

    # Hostile event text: shown as text, never run or parsed as HTML (server- and JS-rendered).
    await run(browser.get, base + "/slots/sweep/1")
    for _ in range(2):  # as served, then after the JavaScript redrew the tables
        events = await run(browser.find_element, By.ID, "events")
        assert HOSTILE in events.text
        assert await run(events.find_elements, By.TAG_NAME, "img") == []
        assert await run(events.find_elements, By.TAG_NAME, "b") == []
        assert await run(browser.execute_script, "return window.__pwned;") is None
        await asyncio.sleep(3)  # past one poll (page.js POLL_MS)
    assert await run(console_errors, browser) == []
