"""`zone_health` (migration 0003): the daemon's record of which (project, zone) it can list,
read back as `ZoneHealth` records and attached to `status` per fleet."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from store_support import T0, P, open_raw, seed

from tpucared.core.model.specs import ErrorKind
from tpucared.inspect.status import status_document, status_lines
from tpucared.store import Store
from tpucared.store.snapshot import ZoneHealth

FAILING = ZoneHealth(
    "proj",
    "z-b",
    failures=3,
    error_kind=ErrorKind.TRANSIENT,
    error_message="cannot reach http://127.0.0.1:9/: connection refused",
    failing_since=T0,
    last_ok_at=T0 - timedelta(minutes=1),
    unreachable=True,
    next_list_at=T0 + timedelta(minutes=6),
)


async def test_a_row_is_written_replaced_and_read_back(store: Store) -> None:
    async with store.write() as tx:
        await tx.save_zone_health(ZoneHealth("proj", "z-a", last_ok_at=T0), T0)
        await tx.save_zone_health(ZoneHealth("proj", "z-b", failures=1), T0)
    async with store.write() as tx:
        await tx.save_zone_health(FAILING, T0 + timedelta(seconds=1))
    async with store.read() as r:
        rows = await r.zone_health()
    assert rows == [ZoneHealth("proj", "z-a", last_ok_at=T0), FAILING]
    assert isinstance(rows[1].error_kind, ErrorKind)


async def test_status_names_the_failing_zones_of_each_fleet(store: Store) -> None:
    await seed(store, "other", 1, T0)
    async with store.write() as tx:
        await tx.record_fleet("sweep", "h", json.dumps({"zones": ["z-a", "z-b"]}), T0)
        await tx.ensure_slots("sweep", 2, T0)
        await tx.save_zone_health(FAILING, T0)
        await tx.save_zone_health(ZoneHealth("proj", "z-a", last_ok_at=T0), T0)
        # "other" has no configured zones here, but a node in z-b.
        node = await tx.request_node("other", 0, "other-0", "z-b", "v4-8", T0)
        await tx.transition(node.id, P.REQUESTED, P.CREATING, T0)
    fleets = {f.fleet.name: f for f in await store.status()}
    assert fleets["sweep"].failing_zones == (FAILING,)
    assert fleets["other"].failing_zones == (FAILING,)

    doc = status_document(list(fleets.values()), T0 + timedelta(minutes=5))
    assert [z["zone"] for z in doc["zones"]] == ["z-b"]  # once, though two fleets have it
    assert doc["zones"][0] == {
        "project": "proj",
        "zone": "z-b",
        "failed_lists": 3,
        "unreachable": True,
        "error_kind": "transient",
        "error_message": FAILING.error_message,
        "failing_since": "2025-06-01T12:00:00Z",
        "last_ok_at": "2025-06-01T11:59:00Z",
        "next_list_at": "2025-06-01T12:06:00Z",
    }
    assert doc["fleets"][0]["failing_zones"] == ["z-b"]
    text = "\n".join(status_lines(list(fleets.values()), T0 + timedelta(minutes=5)))
    line = "zone z-b: unreachable, 3 failed lists in a row for 5m00s, asked again in 1m00s: "
    assert line + "transient: cannot reach" in text
    assert "listing z-b fails: transient" in text  # LAST ERROR of the slots without their own


async def test_a_zone_listing_fine_is_not_shown(store: Store) -> None:
    async with store.write() as tx:
        await tx.record_fleet("sweep", "h", json.dumps({"zones": ["z-a"]}), T0)
        await tx.save_zone_health(ZoneHealth("proj", "z-a", last_ok_at=T0), T0)
    (fleet,) = await store.status()
    assert fleet.failing_zones == ()
    assert status_document([fleet], T0)["zones"] == []


async def test_a_database_without_the_table_reads_as_no_zones(migrated: Path) -> None:
    conn = open_raw(migrated)
    conn.execute("DROP TABLE zone_health")
    conn.commit()
    conn.close()
    async with Store.open(migrated, read_only=True) as store:
        async with store.read() as r:
            assert await r.zone_health() == []
        assert await store.status() == []
