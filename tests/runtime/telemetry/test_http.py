"""The daemon's HTTP endpoints, served for real on 127.0.0.1 (port 0) and read with aiohttp."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from inspect_support import T0, cli, populate
from prometheus_client.parser import text_string_to_metric_families

from bench import daemon_config
from bench.common import free_port
from tpucared.core.model.records import CreateAttemptRecord
from tpucared.runtime.telemetry.metrics import DaemonMetrics
from tpucared.runtime.telemetry.server import (
    MIN_THRESHOLD,
    Health,
    HttpServer,
    start_http,
    store_status,
)
from tpucared.store import Store


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Served:
    server: HttpServer
    health: Health
    clock: FakeClock
    metrics: DaemonMetrics
    store: Store
    db: Path
    session: aiohttp.ClientSession

    async def get(self, path: str) -> tuple[int, str, str]:
        async with self.session.get(self.server.url + path) as resp:
            return resp.status, resp.headers["Content-Type"], await resp.text()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    db = tmp_path / "state.db"
    await populate(db)
    clock = FakeClock()
    health = Health(30.0, clock=clock)
    metrics = DaemonMetrics()
    async with Store.open(db) as store, aiohttp.ClientSession() as session:
        server = await start_http(
            "127.0.0.1", 0, health=health, metrics=metrics, status=store_status(store)
        )
        try:
            yield Served(server, health, clock, metrics, store, db, session)
        finally:
            await server.stop()


def test_health_threshold_from_the_poll_interval() -> None:
    assert Health.for_poll_interval(60).threshold == 180
    assert Health.for_poll_interval(1).threshold == MIN_THRESHOLD
    with pytest.raises(ValueError, match="positive"):
        Health(0)


async def test_healthz_turns_503_when_ticks_stop_and_200_when_they_resume(served: Served) -> None:
    assert served.server.port > 0
    assert served.server.url == f"http://127.0.0.1:{served.server.port}"
    assert await served.get("/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
    served.clock.now += 31  # no tick since the start, past the threshold
    status, _, body = await served.get("/healthz")
    assert status == 503
    assert body == "no reconcile tick completed since the start 31.0s ago (threshold 30.0s)\n"
    served.health.tick()
    assert (await served.get("/healthz"))[0] == 200
    served.clock.now += 30  # exactly at the threshold: still fine
    assert (await served.get("/healthz"))[0] == 200
    served.clock.now += 15
    status, _, body = await served.get("/healthz")
    assert status == 503
    assert body.startswith("the last reconcile tick completed 45.0s ago")


async def test_metrics_exposes_every_family_with_values(served: Served) -> None:
    m = served.metrics
    m.observe_tick(0.4)
    m.api_request("nodes.list", "200", 0.05)
    m.record_create(CreateAttemptRecord("sweep", 1, "z-a", "v4-32", T0, "capacity", 2.0))
    await m.refresh(served.store, T0)
    status, content_type, body = await served.get("/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert set(families) >= {
        "tpucared_build_info",
        "tpucared_nodes",
        "tpucared_slots",
        "tpucared_workloads_running",
        "tpucared_preemptions",
        "tpucared_create_attempts",
        "tpucared_dead_to_delete_seconds",
        "tpucared_recovery_seconds",
        "tpucared_workload_attempts",
        "tpucared_tick_seconds",
        "tpucared_last_tick_timestamp_seconds",
        "tpucared_api_requests",
        "tpucared_api_request_seconds",
        "tpucared_slot_goodput_ratio",
        "tpucared_slot_wall_seconds",
        "tpucared_slot_productive_seconds",
    }
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    assert samples[("tpucared_nodes", (("fleet", "sweep"), ("phase", "ready")))] == 1
    assert samples[("tpucared_tick_seconds_count", ())] == 1
    assert samples[("tpucared_api_requests_total", (("call", "nodes.list"), ("status", "200")))]
    key = ("fleet", "sweep"), ("outcome", "capacity"), ("zone", "z-a")
    assert samples[("tpucared_create_attempts_total", key)] == 1


async def test_v1_status_is_the_clis_json(served: Served) -> None:
    status, content_type, body = await served.get("/v1/status")
    assert status == 200
    assert content_type == "application/json; charset=utf-8"
    served_doc = json.loads(body)
    cli_doc = json.loads(await asyncio.to_thread(cli, "status", "--json", "--db", str(served.db)))
    for doc in (served_doc, cli_doc):
        assert doc.pop("generated_at")
    assert served_doc == cli_doc
    assert [f["name"] for f in served_doc["fleets"]] == ["eval", "sweep"]


async def test_a_failing_status_read_is_a_json_500() -> None:
    async def broken() -> dict[str, Any]:
        raise RuntimeError("database is locked")

    server = await start_http(
        "127.0.0.1", 0, health=Health(30), metrics=DaemonMetrics(), status=broken
    )
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(server.url + "/v1/status") as resp,
        ):
            assert resp.status == 500
            assert await resp.json() == {"error": "status read failed: database is locked"}
    finally:
        await server.stop()


async def test_a_taken_port_fails_to_start_and_leaves_nothing_open() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match="address already in use"):
            await start_http(
                "127.0.0.1", port, health=Health(30), metrics=DaemonMetrics(), status=dict_source
            )


async def dict_source() -> dict[str, Any]:
    return {}


@pytest.mark.parametrize(("host", "warned"), [("0.0.0.0", True), ("127.0.0.1", False)])
async def test_listening_on_every_interface_is_warned_about(
    tmp_path: Path, host: str, warned: bool
) -> None:
    """/v1/status and /metrics are unauthenticated: binding every interface is said aloud."""
    from structlog.testing import capture_logs

    from tpucared.config import load_config
    from tpucared.runtime.clock import SystemClock
    from tpucared.runtime.telemetry.endpoints import Telemetry

    port = free_port()  # the config refuses port 0
    path = tmp_path / "fleet.toml"
    minimal = daemon_config.minimal(daemon_config.fleet("f"), daemon={"http": f"{host}:{port}"})
    daemon_config.write(path, minimal)
    config = load_config(path)
    async with Store.open(tmp_path / "state.db") as store:
        telemetry = Telemetry(config, store, SystemClock())
        with capture_logs() as logs:
            await telemetry.start()
            await telemetry.stop()
    warnings = [e for e in logs if e["log_level"] == "warning" and e["event"] == "http.exposed"]
    assert len(warnings) == (1 if warned else 0)


async def test_a_connection_that_never_finishes_its_headers_is_closed(tmp_path: Path) -> None:
    """Slow clients cannot hold descriptors: an unfinished request is dropped after the idle
    timeout, while the server keeps answering everyone else."""
    db = tmp_path / "state.db"
    await populate(db)
    async with Store.open(db) as store:
        server = await start_http(
            "127.0.0.1",
            0,
            health=Health(30.0),
            metrics=DaemonMetrics(),
            status=store_status(store, lambda: T0),
            idle_timeout=0.5,
        )
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
            await writer.drain()
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server
            assert loop.time() - started < 5
            writer.close()
            async with (
                aiohttp.ClientSession() as session,
                session.get(server.url + "/healthz") as resp,
            ):
                assert resp.status in (200, 503)
        finally:
            await server.stop()
