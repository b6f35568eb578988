"""What a capacity hunt costs per cycle (issue 17): once two creates of a zone and type have
failed, the next create's operation is polled first a hair after their median duration (one
poll usually finds it done), and the ticks woken only by the stockout's end and by the
backoff's end plan on the lists of the tick before: no list per cycle, only the poll's (one
every poll interval), where there were two. Counted in the emulator's request log; no
timing is asserted beyond the order of the requests."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from runtime_support import SLOW, Control, Daemon, query, wait_for, write_config

pytestmark = pytest.mark.slow


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    # A failing create's operation ends after 1 s: long enough to see polls come too early.
    return {**emulator_options, "create_seconds": 1.0}


def _cycles(requests: list[dict[str, Any]]) -> list[dict[str, int]]:
    """Per create of sweep-0 (but the last): the operation polls and node lists until the
    next create."""
    creates = [
        i for i, r in enumerate(requests) if r["method"] == "POST" and r["path"].endswith("/nodes")
    ]
    cycles = []
    for a, b in pairwise(creates):
        between = requests[a + 1 : b]
        cycles.append(
            {
                "polls": sum(1 for r in between if "/operations/" in r["path"]),
                "lists": sum(
                    1 for r in between if r["method"] == "GET" and r["path"].endswith("/nodes")
                ),
            }
        )
    return cycles


async def test_a_hunt_polls_once_when_it_knows_and_lists_only_at_the_polls(
    tmp_path: Path, control: Control, daemons: Any
) -> None:
    db = tmp_path / "state.db"
    await control.capacity(0)
    config = write_config(
        tmp_path,
        control.emulator.url,
        size=1,
        poll="10s",
        policy={"capacity_backoff": "1s", "capacity_backoff_cap": "1s"},
    )
    since = control.emulator.state.now()
    daemon: Daemon = daemons(config)
    await daemon.start()

    async def attempts() -> bool:
        return len(query(db, "SELECT * FROM create_attempts")) >= 8

    await wait_for(attempts, SLOW, "8 failed creates")
    cycles = _cycles(await control.requests(since))
    assert len(cycles) >= 7, cycles
    learning, learnt = cycles[:2], cycles[2:]
    # While learning, the fixed schedule (0.5 s, 1.5 s...) needs more than one poll.
    assert all(c["polls"] >= 2 for c in learning), cycles
    assert median(c["polls"] for c in learnt) == 1, cycles
    # Neither the stockout's end nor the backoff's end lists: only the 10 s poll does, and
    # more than one cycle fits in a poll interval.
    assert median(c["lists"] for c in learnt) == 0, cycles
    assert sum(c["lists"] for c in cycles) <= len(cycles) / 2, cycles
