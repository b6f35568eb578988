"""Every loss with its cause, end to end (issue 41 item 4): the real daemon keeps a fleet of two
spot TPU nodes against the emulator; one is preempted (the TPU API says PREEMPTED), the other
is deleted by someone else (a DELETE on the API, not ours: DELETING for a while). Each is
recorded as itself (`nodes.loss_cause`, the `cause` of the one event recording the loss),
`tpucared status --json` counts each slot's loss, and `/metrics` counts both in
`tpucared_losses_total`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from runtime_support import SLOW, Rig, converged, query, tpucared, wait_for, write_config

from bench.common import free_port
from bench.daemon_config import PROJECT, ZONE

pytestmark = pytest.mark.slow


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    # A delete takes 2 s: someone else's delete is seen DELETING, not only gone.
    return {**emulator_options, "delete_seconds": 2.0}


async def test_a_preemption_and_an_outside_delete_are_each_recorded_as_themselves(rig: Rig) -> None:
    tmp_path, control, daemons = rig.tmp_path, rig.control, rig.daemons
    db, port = tmp_path / "state.db", free_port()
    config = write_config(tmp_path, control.emulator.url, size=2, http_port=port)
    await daemons(config).start()
    await wait_for(lambda: converged(control, db, 2), SLOW, "two READY nodes")
    first = {r["node_name"]: r["id"] for r in query(db, "SELECT * FROM nodes")}
    await control.node_action("sweep-0", "preempt")
    url = f"{control.emulator.url}/v2/projects/{PROJECT}/locations/{ZONE}/nodes/sweep-1"
    async with control.session.delete(url) as response:
        assert response.status == 200, await response.text()

    async def both_recorded() -> dict[str, str | None]:
        rows = query(db, "SELECT node_name, id, loss_cause FROM nodes")
        causes = {r["node_name"]: r["loss_cause"] for r in rows if r["id"] in first.values()}
        return causes if all(causes.values()) and len(causes) == 2 else {}

    causes = await wait_for(both_recorded, SLOW, "both losses recorded")
    assert causes == {"sweep-0": "preempted", "sweep-1": "deleted_outside"}
    events = query(
        db,
        "SELECT node, kind, json_extract(details, '$.cause') AS cause FROM events "
        "WHERE json_extract(details, '$.cause') IS NOT NULL",
    )
    assert sorted((e["node"], e["kind"], e["cause"]) for e in events) == [
        ("sweep-0", "node.dead", "preempted"),
        ("sweep-1", "node.deleting", "deleted_outside"),
    ]
    await wait_for(lambda: converged(control, db, 2), SLOW, "both slots READY again")

    code, out, err = await tpucared("status", "-c", str(config), "--json")
    assert code == 0, err
    slots = json.loads(out)["fleets"][0]["slots"]
    assert [s["losses"] for s in slots] == [{"preempted": 1}, {"deleted_outside": 1}]

    async def counted() -> dict[str, float]:
        async with control.session.get(f"http://127.0.0.1:{port}/metrics") as response:
            lines = (await response.text()).splitlines()
        found = {}
        for cause in ("preempted", "deleted_outside"):
            series = f'tpucared_losses_total{{cause="{cause}",fleet="sweep"}} '
            for line in lines:
                if line.startswith(series):
                    found[cause] = float(line[len(series) :])
        return found if len(found) == 2 else {}

    assert await wait_for(counted, SLOW, "both losses in /metrics") == {
        "preempted": 1.0,
        "deleted_outside": 1.0,
    }
