"""The real daemon (`python -m tpucared run`) with `daemon.db` a PostgreSQL URL, against the
emulator: it migrates the empty database, brings the fleet up and records every node READY,
replaces a preempted one, stops cleanly on SIGTERM, and never logs the URL's password. The
database is read with `psql`, independent of the store."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from postgres_support import PASSWORD, PASSWORD_USER, PostgresServer
from runtime_support import SLOW, Control, Daemon, free_port, ours, wait_for, write_config

pytestmark = pytest.mark.slow


async def test_the_daemon_runs_a_fleet_on_postgres(
    tmp_path: Path,
    control: Control,
    daemons: Callable[[Path], Daemon],
    postgres: PostgresServer,
) -> None:
    name = postgres.create_database(owner=PASSWORD_USER)
    try:
        url = postgres.url(name, user=PASSWORD_USER, password=PASSWORD)
        config = write_config(tmp_path, control.emulator.url, http_port=free_port())
        text = config.read_text(encoding="utf-8")
        db = url.render_as_string(hide_password=False)
        config.write_text(text.replace('db = "state.db"', f'db = "{db}"'), encoding="utf-8")

        async def rows(sql: str) -> list[list[str]]:
            try:
                out = await asyncio.to_thread(postgres.psql, sql, name)
            except Exception as exc:
                if "does not exist" in str(exc):
                    return []  # the daemon is still migrating the new database
                raise
            return [line.split("|") for line in out.splitlines() if line]

        async def ready(n: int) -> list[list[str]] | None:
            """The READY incarnations (id, slot) once n are READY here and in the cloud."""
            live = await rows("SELECT id, slot FROM nodes WHERE phase = 'ready' ORDER BY slot")
            cloud = [x for x in ours(await control.nodes()) if x["node"]["state"] == "READY"]
            return live if len(live) == n == len(cloud) else None

        daemon = await daemons(config).start()
        first = await wait_for(lambda: ready(3), SLOW, "3 nodes READY in PostgreSQL")
        await control.node_action("sweep-1", "preempt")
        replaced_id = first[1][0]

        async def replaced() -> list[list[str]] | None:
            live = await ready(3)
            return live if live and replaced_id not in {r[0] for r in live} else None

        await wait_for(replaced, SLOW, "sweep-1 replaced and READY again")
        assert await rows(f"SELECT phase, end_reason FROM nodes WHERE id = {replaced_id}") == [
            ["deleted", "preempted"]
        ]
        assert await rows("SELECT slot, preemptions FROM slots ORDER BY slot") == [
            ["0", "0"],
            ["1", "1"],
            ["2", "0"],
        ]
        counter = await rows("SELECT counter FROM change_counter")
        assert int(counter[0][0]) > 0  # the triggers ran for the daemon's writes

        daemon.signal(signal.SIGTERM)
        assert await daemon.wait(30) == 0
        log = daemon.log_path.read_text(encoding="utf-8", errors="replace")
        assert "daemon.stopped" in log
        assert PASSWORD not in log
        assert f"{PASSWORD_USER}:***@" in log  # the URL it logged, password hidden
    finally:
        postgres.drop_database(name)
