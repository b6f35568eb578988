"""The create rate (core/nodes/create_rate.py, issue 31): at most `creates_per_minute` creates
sent in any 60 s per cloud API and project, the plan's own included."""

from __future__ import annotations

from datetime import timedelta

from tpucared.core.vocab.actions import CreateNode
from tpucared.core.vocab.policy import Policy

from ..core_support import ago, run, snapshot, spec, world


def test_the_create_rate_counts_the_last_minutes_sends_and_this_plans() -> None:
    """At most `creates_per_minute` sent in any 60 s per cloud API and project: 3 sent in the
    last minute (one just outside it) and a limit of 5 leave room for 2 this plan; the first
    slot held waits until the oldest send in the window is a minute old."""
    s = spec(size=5)
    sent = {("tpu", ""): (ago(seconds=61), ago(seconds=50), ago(seconds=20), ago(seconds=5))}
    p = run([s], world(), snapshot(specs=[s]), policy=Policy(creates_per_minute=5), sent=sent)
    assert [c.node_name for c in p.of(CreateNode)] == ["sweep-0", "sweep-1"]
    held = {h.node_name: h for h in p.holds}
    assert set(held) == {"sweep-2", "sweep-3", "sweep-4"}
    assert all("create rate: 5 creates in the last minute" in h.reason for h in held.values())
    assert held["sweep-2"].until == ago(seconds=50) + timedelta(minutes=1)
    # Another project's sends are its own: they leave this one's room alone.
    other = {("tpu", "elsewhere"): tuple(ago(seconds=1) for _ in range(5))}
    p = run([s], world(), snapshot(specs=[s]), policy=Policy(creates_per_minute=5), sent=other)
    assert len(p.of(CreateNode)) == 5


def test_the_default_limits_let_a_big_fleet_recreate_at_the_rate() -> None:
    """A fleet that lost many nodes: the default creates as many as the rate allows in one
    plan (60), not the old 8 in flight."""
    s = spec(size=100)
    p = run([s], world(), snapshot(specs=[s]))
    assert len(p.of(CreateNode)) == Policy().creates_per_minute == 60
    assert all("create rate" in h.reason for h in p.holds)
