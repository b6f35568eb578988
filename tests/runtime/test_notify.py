"""`[[notify]]` webhooks against a real local HTTP receiver and the real daemon: a zone that
cannot be listed and the /healthz verdict reach Slack-format and JSON-format webhooks, a
receiver that fails twice still gets the news (retried), the same news is not repeated, and
the webhook's secret URL is never in the log or the database. An unset url_env stops the
start in one line, before the database exists."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from runtime_support import REPO, SLOW, Control, cli_env, free_port, wait_for, write_config

from tpucared.core.model.records import NodePhase

pytestmark = pytest.mark.slow

SECRET = "/services/T0001/B0002/s3cr3tT0kenXYZ"


@dataclass
class Receiver:
    """A webhook endpoint: records every post; answers 500 to the first `fail_first`."""

    port: int
    fail_first: int = 0
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        status = 500 if len(self.answered) < self.fail_first else 200
        self.answered.append(status)
        if status == 200:
            self.posts.append((request.path, body))
        return web.Response(status=status, text="ok" if status == 200 else "boom")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver(free_port(), fail_first=2)
    app = web.Application()
    app.router.add_post("/{tail:.*}", r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", r.port).start()
    yield r
    await runner.cleanup()


def _with_webhooks(config: Path, slack: str) -> None:
    text = config.read_text()
    text += f"""
[[notify]]
name = "team-slack"
url = "{slack}"
min_interval = "10m"

[[notify]]
name = "pager"
url_env = "TEST_PAGER_URL"
format = "json"
on = ["unhealthy", "notice"]
"""
    config.write_text(text)


async def test_news_reaches_both_formats_once_and_the_secret_stays_secret(
    tmp_path: Path, receiver: Receiver
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # the TPU API endpoint: nothing listens
    config = write_config(tmp_path, nowhere, size=1)
    _with_webhooks(config, receiver.url(SECRET))
    log = tmp_path / "daemon.log"
    env = {**cli_env(), "TEST_PAGER_URL": receiver.url("/pager")}
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tpucared", "run", "-c", str(config),
            stdout=out, stderr=asyncio.subprocess.STDOUT, env=env, cwd=REPO,
        )  # fmt: skip
        try:

            async def told() -> bool:
                paths = [p for p, _ in receiver.posts]
                unhealthy = [b for p, b in receiver.posts if b.get("kind") == "unhealthy"]
                return SECRET in paths and "/pager" in paths and bool(unhealthy)

            await wait_for(told, 3 * SLOW, "news at both webhooks")
            await asyncio.sleep(2)  # more ticks: nothing may be repeated
        finally:
            process.terminate()
            assert await asyncio.wait_for(process.wait(), 30) == 0

    slack = [b for p, b in receiver.posts if p == SECRET]
    assert all(set(b) == {"text"} and b["text"].startswith("tpucared: ") for b in slack)
    zone = [b for b in slack if "us-central2-b: cannot list nodes" in b["text"]]
    down = [b for b in slack if b["text"].startswith("tpucared: tpucared is unhealthy: ")]
    assert (len(zone), len(down), len(slack)) == (1, 1, 2), slack  # each told once
    pager = [b for p, b in receiver.posts if p == "/pager"]
    kinds = sorted(b["kind"] for b in pager)
    assert kinds == ["notice", "unhealthy"], pager
    notice = next(b for b in pager if b["kind"] == "notice")
    assert notice["zone"] == "us-central2-b"
    assert {"subject", "summary", "fleet", "slot", "at", "more"} <= set(notice)
    unhealthy = next(b for b in pager if b["kind"] == "unhealthy")
    assert unhealthy["summary"].startswith("tpucared is unhealthy: ")
    assert receiver.answered[:2] == [500, 500]  # the first post was retried until it landed

    logged = log.read_text()
    assert "notify.sent" in logged
    assert "s3cr3tT0ken" not in logged
    with sqlite3.connect(tmp_path / "state.db") as db:
        dump = "\n".join(db.iterdump())
    assert "s3cr3tT0ken" not in dump


async def test_an_unset_url_env_stops_the_start_in_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, f"http://127.0.0.1:{free_port()}", size=1)
    _with_webhooks(config, "https://hooks.example.com" + SECRET)
    env = {k: v for k, v in cli_env().items() if k != "TEST_PAGER_URL"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tpucared", "run", "-c", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=REPO,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert err.decode().splitlines() == [
        f"tpucared: {config}: notify pager: environment variable TEST_PAGER_URL is not set or empty"
    ]
    assert "s3cr3tT0ken" not in out.decode() + err.decode()
    assert not (tmp_path / "state.db").exists()
    assert not (tmp_path / "id_ed25519").exists()
    assert "TEST_PAGER_URL" not in os.environ


async def test_a_stockout_longer_than_stockout_after_is_told_once(
    tmp_path: Path, receiver: Receiver, control: Control, daemons: Any
) -> None:
    receiver.fail_first = 0
    await control.capacity(0)  # every create meets a stockout
    config = write_config(tmp_path, control.emulator.url, size=1)
    config.write_text(
        config.read_text()
        + f"""
[[notify]]
name = "capacity"
url = "{receiver.url("/capacity")}"
format = "json"
on = ["stockout"]
stockout_after = "2s"
"""
    )
    await daemons(config).start()

    async def told() -> list[dict[str, Any]]:
        return [b for p, b in receiver.posts if p == "/capacity"]

    (news,) = await wait_for(told, SLOW, "the stockout news")
    assert (news["kind"], news["fleet"], news["slot"]) == ("stockout", "sweep", 0)
    assert news["summary"].startswith("sweep/0 has waited ")
    assert news["summary"].endswith("for TPU capacity (tpucared keeps hunting)")
    await asyncio.sleep(3)  # still stocked out: the same stockout is not told again
    assert len(await told()) == 1


@pytest.mark.parametrize(
    ("phase", "waiting"),
    [
        (None, True),  # between two creates
        (NodePhase.REQUESTED, True),  # a retry in flight: the same stockout goes on
        (NodePhase.CREATING, True),
        (NodePhase.READY, False),  # a node serves: over
    ],
)
def test_a_retry_in_flight_does_not_end_the_stockout(
    phase: NodePhase | None, waiting: bool
) -> None:
    """Otherwise each hunting cycle would start a new stockout, told again (its subject
    carries its start)."""
    from tpucared.core.model.records import (
        CreateAttemptRecord,
        FleetRecord,
        IncarnationRecord,
        SlotRecord,
    )
    from tpucared.core.planning.stockout import slots_in_stockout as _waiting
    from tpucared.store.snapshot import Snapshot

    at = datetime(2026, 11, 25, tzinfo=UTC)
    key = ("sweep", 0)
    nodes = {}
    if phase is not None:
        nodes[(*key, 0)] = IncarnationRecord(
            id=1, fleet="sweep", slot=0, node_name="sweep-0", zone="z", accelerator_type="v4-8",
            phase=phase, phase_since=at, requested_at=at,
        )  # fmt: skip
    snapshot = Snapshot(
        fleets={"sweep": FleetRecord(name="sweep", spec_hash="h", spec_json="{}", applied_at=at)},
        slots={key: SlotRecord(fleet="sweep", index=0, run_id="r", create_failures=3)},
        nodes=nodes,
        last_creates={key: CreateAttemptRecord("sweep", 0, "z", "v4-8", at, "capacity")},
    )
    assert (_waiting(snapshot) == [key]) is waiting
