"""The runtime's commands as a person runs them (`python -m tpucared ...` subprocesses against
the emulator): `plan` changes nothing, `down` deletes our nodes and nothing else, `db upgrade`,
configuration errors stop everything with exit 2, and the two stages of signals."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import (
    OWNER,
    PROJECT,
    SLOW,
    ZONE,
    Control,
    Daemon,
    converged,
    labels,
    live_nodes,
    ours,
    query,
    short,
    tpucared,
    wait_for,
    write_config,
)

from tpucared.core.model.specs import CapacityKind
from tpucared.gcp import NoAuth
from tpucared.gcp.tpu import TpuClient
from tpucared.gcp.tpu.bodies import NodeShape

pytestmark = pytest.mark.slow

Daemons = Callable[[Path], Daemon]
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


def digest(*paths: Path) -> dict[str, str | None]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for p in paths
    }


async def test_plan_prints_what_it_would_do_and_changes_nothing(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    config = write_config(tmp_path, control.emulator.url)
    db, key = tmp_path / "state.db", tmp_path / "id_ed25519"

    # No database yet: planned against an empty one, which is not created.
    code, out, err = await tpucared("plan", "-c", str(config), "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert [a["action"] for a in plan["actions"]] == [
        "record-fleet",
        "open-slot",
        "open-slot",
        "open-slot",
        "create",
        "create",
        "create",
    ]
    assert plan["actions"][4]["node_name"] == "sweep-0"
    assert plan["actions"][4]["labels"]["tpucared-owner"] == OWNER
    assert not db.exists()
    assert not key.exists()

    # A running fleet, stopped; one node preempted since.
    daemon = await daemons(config).start()
    await wait_for(lambda: converged(control, db, 3), SLOW, "the fleet")
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(30) == 0
    await control.node_action("sweep-1", "preempt")
    wal = db.with_name("state.db-wal")
    before = digest(db)
    assert not wal.exists()  # a clean stop checkpoints everything into the file

    since = time.time()
    code, out, err = await tpucared("plan", "-c", str(config))
    assert code == 0, err
    assert out.splitlines() == [
        "transition   sweep-1 [#2] ready -> dead (cause preempted): preempted",
        "delete       sweep-1 [#2 dead] node in us-central2-b: dead: delete it at once",
        "hold         sweep-1: the previous node is still deleting; its name is not free yet",
    ]

    # The database is byte-for-byte the same. (SQLite's WAL readers may leave the empty
    # -wal/-shm sidecar files behind; not one byte of data is written to them.)
    assert digest(db) == before
    assert not wal.exists() or wal.stat().st_size == 0
    requests = await control.requests(since)
    assert requests
    assert [r for r in requests if r["method"] in MUTATING] == []
    assert not err.strip() or "error" not in err.lower()


async def test_down_deletes_every_node_we_own_and_nothing_else(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    # Someone else's nodes: one holds our slot 2's name, one carries our fleet label with
    # another owner, one has no labels at all.
    async with TpuClient(control.emulator.url, token_source=NoAuth()) as client:
        for name, node_labels in (
            ("sweep-2", {}),
            ("sweep-3", {"tpucared-fleet": "sweep", "tpucared-owner": "someone-else"}),
            ("unrelated", {}),
        ):
            await client.create_node(
                PROJECT,
                ZONE,
                name,
                NodeShape(
                    accelerator_type="v4-8",
                    extra={"runtime_version": "tpu-ubuntu2204-base"},
                    capacity=CapacityKind.SPOT,
                    labels=node_labels,
                ),
            )
    config = write_config(tmp_path, control.emulator.url)
    db = tmp_path / "state.db"
    daemon = await daemons(config).start()

    async def two_of_ours() -> bool:
        mine = ours(await control.nodes())
        return len(mine) == 2 and all(n["state"] == "READY" for n in mine)

    await wait_for(two_of_ours, SLOW, "sweep-0 and sweep-1 (sweep-2's name is taken)")
    await wait_for(lambda: _all_ready(db, 2), SLOW, "both recorded READY")
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(30) == 0

    code, out, err = await tpucared("down", "-c", str(config))  # no TTY, no --yes
    assert code == 2
    assert "--yes" in err
    assert len(ours(await control.nodes())) == 2

    code, out, err = await tpucared("down", "-c", str(config), "--yes")
    assert code == 0, err
    deleted = sorted(line.split()[1] for line in out.splitlines() if line.startswith("deleting"))
    assert deleted == ["sweep-0", "sweep-1"]
    assert "2 node(s) deleted" in out

    left = {short(n): labels(n) for n in await control.nodes()}
    assert sorted(left) == ["sweep-2", "sweep-3", "unrelated"]
    assert left["sweep-3"]["tpucared-owner"] == "someone-else"
    assert live_nodes(db) == {}
    assert [r["down"] for r in query(db, "SELECT down FROM fleets")] == [1]

    # The daemon keeps a fleet that is down, down, until `up`.
    daemon = await daemons(config).start()
    await asyncio.sleep(2.0)
    assert ours(await control.nodes()) == []
    code, out, err = await tpucared("up", "-c", str(config))
    assert code == 0, err
    assert out.strip() == "up: fleet sweep up again: its nodes will be recreated"
    await wait_for(two_of_ours, SLOW, "the fleet back up (sweep-2's name is still taken)")
    assert daemon.process is not None
    assert daemon.process.returncode is None


async def _all_ready(db: Path, n: int) -> bool:
    live = live_nodes(db)
    return len(live) == n and all(r["phase"] == "ready" for r in live.values())


async def test_db_upgrade_and_configuration_errors(tmp_path: Path, control: Control) -> None:
    db = tmp_path / "other" / "x.db"
    code, out, err = await tpucared("db", "upgrade", "--db", str(db))
    assert code == 0, err
    assert out.startswith(f"{db}: at revision ")
    assert db.exists()

    config = write_config(tmp_path, control.emulator.url)
    code, out, _ = await tpucared("db", "upgrade", "-c", str(config))
    assert code == 0
    assert (tmp_path / "state.db").exists()

    # A bad config: one clear line naming the file and the key, exit 2, nothing started.
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad = write_config(bad_dir, control.emulator.url)
    bad.write_text(bad.read_text().replace('poll_interval = "300ms"', "poll_interval = 10"))
    code, out, err = await tpucared("run", "-c", str(bad))
    assert code == 2
    assert f"{bad}: daemon.poll_interval: expected a duration string" in err
    assert sorted(p.name for p in bad_dir.iterdir()) == ["fleet.toml"]  # no db, no key

    # Bad credentials (a missing file is refused with the config; here a key file that is
    # not one): refused before the database or the SSH key is created. The endpoint is https:
    # with the emulator's plain http one the key file would be a config error instead.
    not_a_key = tmp_path / "not-a-key.json"
    not_a_key.write_text("{}")
    bad.write_text(
        bad.read_text()
        .replace("poll_interval = 10", 'poll_interval = "1s"')
        .replace('credentials = "none"', f'credentials = "{not_a_key}"')
        .replace(control.emulator.url, "https://127.0.0.1:9")
    )
    code, out, err = await tpucared("run", "-c", str(bad))
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"tpucared: {bad}: gcp.credentials: ")
    assert "Traceback" not in out + err
    assert sorted(p.name for p in bad_dir.iterdir()) == ["fleet.toml"]  # no db, no key
    bad.write_text(
        bad.read_text()
        .replace('poll_interval = "1s"', "poll_interval = 10")
        .replace(f'credentials = "{not_a_key}"', 'credentials = "none"')
        .replace("https://127.0.0.1:9", control.emulator.url)
    )

    code, _, err = await tpucared("run", "-c", str(tmp_path / "missing.toml"))
    assert code == 2
    assert "missing.toml: cannot read the config" in err

    # Sub-second polls are for emulators only: against the real API it is refused.
    real = bad.read_text().replace("poll_interval = 10", 'poll_interval = "300ms"')
    real = real.replace(f'endpoint = "{control.emulator.url}"', "").replace(
        'credentials = "none"', ""
    )
    bad.write_text(real)
    code, _, err = await tpucared("plan", "-c", str(bad))
    assert code == 2
    assert 'daemon.poll_interval: expected "1s" to "10m", got "300ms"' in err


@pytest.mark.parametrize("command", [["down", "--yes"], ["up"]])
async def test_down_and_up_refuse_bad_credentials_before_creating_anything(
    tmp_path: Path, control: Control, command: list[str]
) -> None:
    # As `run`: a key file that is not one is refused in one line, exit 2, before the database
    # is created or migrated and before an SSH key is generated.
    here = tmp_path / "fleet"
    here.mkdir()
    # An https endpoint and a poll the real API allows: the config itself is valid (a key file
    # with the emulator's plain http endpoint is a config error, refused before credentials).
    config = write_config(here, "https://127.0.0.1:9", poll="1s")
    not_a_key = tmp_path / "not-a-key.json"
    not_a_key.write_text("{}")
    config.write_text(
        config.read_text().replace('credentials = "none"', f'credentials = "{not_a_key}"')
    )
    code, out, err = await tpucared(*command, "-c", str(config))
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"tpucared: {config}: gcp.credentials: "), err
    assert "Traceback" not in out + err
    assert sorted(p.name for p in here.iterdir()) == ["fleet.toml"]  # no db, no key
    assert await control.requests() == []  # not even a list: the cloud was never called


async def test_first_signal_drains_briefly_then_cuts_second_exits_at_once(
    tmp_path: Path, control: Control, daemons: Daemons
) -> None:
    """The first signal lets a call in flight finish within the drain (0.5 s) and cuts one
    that takes longer: the daemon exits 0 within 2 s either way (docs/daemon.md, "Stopping")
    and the next start reconciles the cut call. A second signal exits at once."""
    db = tmp_path / "state.db"
    config = write_config(tmp_path, control.emulator.url, size=1)

    # A create call that takes 0.2 s: SIGTERM waits for it and records its outcome.
    await control.faults({"latency_ms": 200, "paths": ["/nodes"], "methods": ["POST"]})
    daemon = await daemons(config).start()
    await wait_for(lambda: _phase(db, "requested"), SLOW, "a create in flight")
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(30) == 0
    row = live_nodes(db)[0]
    assert row["phase"] == "creating"  # the call finished and its outcome was recorded
    assert row["operation"]

    # An API that never answers: the first SIGINT cuts the call in flight and exits 0 within
    # 2 s; the intent it recorded is there for the next start.
    connected = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def black_hole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        connected.set()
        await reader.read(65536)  # the request; no answer ever comes

    server = await asyncio.start_server(black_hole, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    silent = tmp_path / "silent"
    silent.mkdir()
    try:
        daemon = await daemons(write_config(silent, f"http://127.0.0.1:{port}", size=1)).start()
        await asyncio.wait_for(connected.wait(), SLOW)  # its first list is in flight
        sent = time.monotonic()
        daemon.signal(signal.SIGINT)
        assert await daemon.wait(SLOW) == 0
        assert time.monotonic() - sent < 2.0  # not the 60 s the call could take

        # A second signal during the stop exits at once, without the clean stop. (Sent once
        # the first was handled: two sent back to back may reach the process as one.)
        connected.clear()
        daemon = await daemons(write_config(silent, f"http://127.0.0.1:{port}", size=1)).start()
        await asyncio.wait_for(connected.wait(), SLOW)
        daemon.signal(signal.SIGINT)

        async def stopping() -> bool:
            return any(e.get("event") == "signal.stopping" for e in daemon.log_events())

        await wait_for(stopping, SLOW, "the first signal handled", every=0.01)
        daemon.signal(signal.SIGINT)
        assert await daemon.wait(SLOW) == 128 + signal.SIGINT
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def _phase(db: Path, phase: str) -> bool:
    return any(r["phase"] == phase for r in live_nodes(db).values())
