"""`tpucared goodput` on a database the real daemon wrote against the emulator, for a slot
through a stockout wait and a crash (issue 42, "Done means"): the zone has no capacity at the
first create (the emulator's capacity control at 0), then it is given back; the workload's
first attempt exits non-zero and the next one runs. After a kill -9, the ledger adds up to the
slot's wall time to the microsecond; the wait is `capacity_wait` in the zone (a first-create
stockout loses no node: it has no loss cause), from the first create to the one that got a
node; the crash is `crash_restart` with cause `crash`, its node and zone, from the failed
attempt's end to the next attempt's start (the crash backoff between them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from runtime_support import SLOW, Rig, hosts_emulator_options, query, tpucared, wait_for

from bench.daemon_config import ZONE

pytestmark = pytest.mark.slow

# Attempt 1 (no failure counted yet) crashes after a second; attempt 2 runs on.
RUN = 'sleep 1; if [ "$TPUCARED_FAILURES" = 0 ]; then exit 3; fi; exec sleep 600'
RECOVERY = "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(emulator_options, tmp_path)


def _at(text: str) -> datetime:
    """An ISO time from the JSON or from SQLite (stored in UTC, maybe without the offset)."""
    at = datetime.fromisoformat(text)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


async def test_a_stockout_wait_and_a_crash_in_the_ledger(
    rig: Rig,
) -> None:
    control, db = rig.control, rig.db
    await control.capacity(0)  # the zone is stocked out
    daemon = await rig.start(
        fleet="sweep", accelerator_type="v4-8", run=RUN,
        tables='[policy]\ncapacity_backoff = "1s"\ncapacity_backoff_cap = "1s"\n',
    )  # fmt: skip

    async def stockouts() -> int:
        return len(query(db, "SELECT id FROM create_attempts WHERE outcome = 'capacity'"))

    await wait_for(lambda: _at_least(stockouts, 2), SLOW, "two creates refused for capacity")
    await control.capacity(None)  # given back

    async def attempt_2() -> bool:
        return bool(query(db, "SELECT id FROM workload_attempts WHERE number = 2"))

    await wait_for(attempt_2, SLOW, "attempt 2 after the crash")
    await daemon.kill()  # kill -9: the ledger is the database's

    creates = query(db, "SELECT * FROM create_attempts ORDER BY id")
    refused = [c for c in creates if c["outcome"] == "capacity"]
    [got] = [c for c in creates if c["outcome"] == "ok"]
    first, second = query(db, "SELECT * FROM workload_attempts ORDER BY number")
    assert first["outcome"] == "failed"

    code, out, err = await tpucared("goodput", "--db", str(db), "sweep/0", "--json")
    assert code == 0, err
    document = json.loads(out)
    [fleet] = document["fleets"]
    [slot] = fleet["slots"]
    intervals: list[dict[str, Any]] = slot["intervals"]
    starts = [_at(i["start"]) for i in intervals]
    ends = [_at(i["end"]) for i in intervals]
    assert starts[1:] == ends[:-1]  # no gap, no overlap
    assert ends[-1] == _at(document["now"])
    assert slot["wall_s"] == pytest.approx((ends[-1] - starts[0]).total_seconds(), abs=1e-6)
    assert sum(i["seconds"] for i in intervals) == pytest.approx(slot["wall_s"], abs=1e-3)

    # The stockout: from the first create posted to the request of the node that was made
    # (its create is then provisioning), in the zone; before it, the first request's moment.
    [wait] = [i for i in intervals if i["category"] == "capacity_wait"]
    assert (wait["zone"], wait["cause"], wait["node"]) == (ZONE, None, None)
    assert _at(wait["start"]) == _at(refused[0]["started_at"])
    [made] = query(db, "SELECT requested_at FROM nodes WHERE id = ?", got["node_id"])
    assert _at(wait["end"]) == _at(made["requested_at"])
    assert all(_at(c["started_at"]) < _at(wait["end"]) for c in refused)
    assert {i["category"] for i in intervals[: intervals.index(wait)]} == {"startup"}

    # The crash: productive while attempt 1 ran, crash_restart until attempt 2 started.
    [crash] = [i for i in intervals if i["category"] == "crash_restart"]
    assert (crash["cause"], crash["zone"], crash["node"]) == ("crash", ZONE, "sweep-0")
    assert _at(crash["start"]) == _at(first["ended_at"])
    assert _at(crash["end"]) == _at(second["started_at"])
    before, after = intervals[intervals.index(crash) - 1], intervals[intervals.index(crash) + 1]
    assert before["category"] == after["category"] == "productive"
    assert _at(before["start"]) == _at(first["started_at"])
    # Nothing else was lost: bring-up, attempt 1, the crash, attempt 2.
    assert {i["category"] for i in intervals} == {"capacity_wait", "startup", "productive",
                                                   "crash_restart"}  # fmt: skip
    assert RECOVERY not in slot["categories"]
    causes = {c["cause"]: c["seconds"] for c in slot["top_causes"]}
    assert causes == {"crash": pytest.approx(crash["seconds"], abs=1e-3)}


async def _at_least(count: Callable[[], Any], n: int) -> bool:
    return bool(await count() >= n)
