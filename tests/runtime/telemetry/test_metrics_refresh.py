"""The incremental metrics refresh (`SlotSeries`, `GoodputTracker`, the fleet gauges) against
the full refresh it replaced (tests/metrics_reference.py): the same exposition at every step of
a sequence of snapshots, and work proportional to what changed, not to the number of slots."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inspect_support import T0, spec_json
from metrics_reference import FullRefresh
from prometheus_client import generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from tpucared.core.model.records import (
    AttemptOutcome,
    FleetRecord,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.runtime.telemetry.metrics import DaemonMetrics
from tpucared.store.snapshot import SlotKey, Snapshot, frozen_mapping

P = NodePhase
LIVE = [P.REQUESTED, P.CREATING, P.READY, P.DEAD, P.DELETING]


@dataclass(frozen=True)
class Slot:
    done: bool = False
    phase: NodePhase | None = P.READY  # its live node's, None: no live node
    running: bool = False  # a workload attempt running


@dataclass(frozen=True)
class World:
    fleets: dict[str, tuple[bool, bool]]  # name -> (has a workload, down)
    slots: dict[SlotKey, Slot]


def build(world: World) -> Snapshot:
    """A snapshot of `world`, made of new records (as a store read after a write makes)."""
    fleets = {
        name: FleetRecord(name, f"h-{workload}", spec_json(name, workload), T0, down=down)
        for name, (workload, down) in world.fleets.items()
    }
    slots, nodes, attempts = {}, {}, {}
    for n, (key, s) in enumerate(world.slots.items(), start=1):
        fleet, index = key
        slots[key] = SlotRecord(fleet, index, f"run-{fleet}-{index}", done=s.done)
        if s.phase is not None:
            nodes[(*key, 0)] = IncarnationRecord(
                n, fleet, index, f"{fleet}-{index}", "z", "v4-8", s.phase, T0, T0
            )
        ended = None if s.running else T0
        outcome = None if s.running else AttemptOutcome.FAILED
        attempts[key] = WorkloadAttemptRecord(n, fleet, index, n, 1, T0, ended, outcome)
    return Snapshot(
        fleets=frozen_mapping(fleets),
        slots=frozen_mapping(slots),
        nodes=frozen_mapping(nodes),
        last_attempts=frozen_mapping(attempts),
    )


class Wall:
    """`time.time` for the counters' `_created`: moved by the test, read by both sides."""

    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall(monkeypatch: pytest.MonkeyPatch) -> Wall:
    w = Wall()
    monkeypatch.setattr(time, "time", w)
    return w


def exposition(registry: Any) -> str:
    text: bytes = generate_latest(registry)
    return text.decode()


# One step: the microseconds since the last (negative: the clock stepped back), and the world
# then, or None to refresh with the previous step's very snapshot object (nothing written).
SLOT = st.builds(Slot, st.booleans(), st.sampled_from([None, *LIVE]), st.booleans())
WORLD = st.builds(
    World,
    st.dictionaries(st.sampled_from("abc"), st.tuples(st.booleans(), st.booleans()), max_size=3),
    st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 4)), SLOT, max_size=8),
)


def steps(unit_us: st.SearchStrategy[int]) -> st.SearchStrategy[list[tuple[int, World | None]]]:
    return st.lists(
        st.tuples(unit_us, st.none() | WORLD | WORLD),  # worlds and "same" in a 2:1 ratio
        min_size=1,
        max_size=12,
    )


def drive(seq: list[tuple[int, World | None]], wall: Wall) -> Iterator[tuple[str, str]]:
    """Both refreshes through the sequence; the two expositions after each step."""
    new, old = DaemonMetrics(), FullRefresh()
    now, snap = T0, build(World({}, {}))
    for dt_us, world in seq:
        now += timedelta(microseconds=dt_us)
        wall.now += 1.0  # series created at this step have their own `_created`
        if world is not None:
            snap = build(world)
        new.set_nodes(snap, now)
        old.set_nodes(snap, now)
        yield exposition(new.registry), exposition(old.metrics.registry)


# Steps of whole multiples of 1/64 s: float sums of those are exact, so the old tracker's
# sums of each interval and the new one's subtraction give the very same numbers.
@settings(max_examples=150, deadline=None)
@given(steps(st.integers(-640, 64 * 600).map(lambda k: k * 15_625)), st.booleans())
def test_the_exposition_is_the_full_refreshs_at_every_step(
    seq: list[tuple[int, World | None]], created: bool
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        wall = Wall()
        mp.setattr(time, "time", wall)
        mp.setattr(prometheus_metrics, "_use_created", created)
        for new, old in drive(seq, wall):
            assert new == old


# Any microseconds: the old tracker summed float seconds (rounding at each addition), the new
# one subtracts integer microseconds (exact). Same series, same order, the same values to
# the last few bits; and a counter never goes back while its series lives (same `_created`).
@settings(max_examples=60, deadline=None)
@given(steps(st.integers(-5_000_000, 60_000_000)))
def test_with_any_intervals_only_float_rounding_differs(
    seq: list[tuple[int, World | None]],
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        wall = Wall()
        mp.setattr(time, "time", wall)
        last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for new, old in drive(seq, wall):
            got, want = samples(new), samples(old)
            assert [s[:2] for s in got] == [s[:2] for s in want]
            assert [s[2] for s in got] == pytest.approx([s[2] for s in want], rel=1e-12)
            now = {(name, labels): value for name, labels, value in got}
            for (name, labels), value in now.items():
                if not name.endswith("_seconds_total"):
                    continue
                created = (name.replace("_total", "_created"), labels)
                if last.get(created) == now[created] and (name, labels) in last:
                    assert value >= last[name, labels], (name, labels)
            last = now


def samples(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return [
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def test_a_worked_sequence_shows_the_same_text_and_the_series_come_and_go(wall: Wall) -> None:
    ready, idle = Slot(), Slot(phase=P.CREATING)
    a = {("a", i): ready for i in range(3)}
    b = {("b", i): Slot(running=i != 1) for i in range(3)}
    fleets = {"a": (False, False), "b": (True, False)}
    seq: list[tuple[int, World | None]] = [
        (0, World(fleets, {**a, **b})),
        (2_000_000, None),  # nothing written: the same snapshot object
        (2_000_000, World(fleets, {**a, **b})),  # equal, rebuilt
        (2_500_000, World(fleets, {**a, ("a", 1): idle, **b})),  # one slot changes
        (2_000_000, World(fleets, {**a, **b, ("b", 2): Slot(done=True)})),  # one is done
        (2_000_000, World(fleets, {**a, ("b", 0): b["b", 0]})),  # b shrinks to 1 slot
        (1_000_000, World({"a": (False, False)}, a)),  # fleet b removed
        (-3_000_000, World({"a": (False, True)}, a)),  # the clock steps back; a goes down
        (4_000_000, World(fleets, {**a, **b})),  # b back, its series from zero
        (4_000_000, None),
    ]
    for step, (new, old) in enumerate(drive(seq, wall)):
        assert new == old, f"step {step}"
        if step == 6:  # fleet b removed: no series of its slots left
            assert 'fleet="b",slot=' not in new
        if step == 8:
            assert 'tpucared_slot_wall_seconds_total{fleet="b",slot="0"} 0.0' in new
    # 2 + 2 + 2.5 + 2 + 2 + 1 s READY; nothing for the step back, nor while the fleet was down.
    assert 'tpucared_slot_wall_seconds_total{fleet="a",slot="0"} 15.5' in new


# -- the work of a refresh ----------------------------------------------------------------------


def many(n: int) -> World:
    return World(
        {"a": (False, False), "b": (True, False)},
        {("a" if i % 2 else "b", i // 2): Slot(running=i % 3 == 0) for i in range(n)},
    )


class LabelCalls:
    """Counts `labels()` calls on the real families (a pass-through wrapper)."""

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = MetricWrapperBase.labels

        def counted(family: MetricWrapperBase, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(family, *args, **kwargs)

        mp.setattr(MetricWrapperBase, "labels", counted)


def one_change(n: int) -> tuple[int, set[SlotKey], int, int]:
    """Refresh n slots, then the same with one slot's node lost: (labels() calls, slots
    touched, accounts rewritten) of that second refresh, and the labels() calls of a refresh
    of the same snapshot after it."""
    m = DaemonMetrics()
    world = many(n)
    m.set_nodes(build(world), T0)
    before = dict(m.slot_series.tracker._accounts)
    changed = build(replace(world, slots={**world.slots, ("a", 0): Slot(phase=P.DEAD)}))
    with pytest.MonkeyPatch.context() as mp:
        calls = LabelCalls(mp)
        touched = m.set_nodes(changed, T0 + timedelta(seconds=2))
        first = calls.count
        assert m.set_nodes(changed, T0 + timedelta(seconds=4)) == set()
    after = m.slot_series.tracker._accounts
    rewritten = sum(1 for k, acc in after.items() if before.get(k) is not acc)
    return first, touched, rewritten, calls.count - first


def test_a_refresh_touches_only_the_slot_that_changed() -> None:
    for calls, touched, rewritten, same_snapshot_calls in (one_change(200), one_change(4000)):
        assert touched == {("a", 0)}
        assert rewritten == 1  # every other slot keeps its very account object
        # The fleet gauges: one series per fleet and phase, per fleet; none per slot or node.
        assert calls == 2 * (5 + 2)
        assert same_snapshot_calls == 0  # nothing written since: nothing to do


def test_every_slot_still_shows_the_time_that_passed(wall: Wall) -> None:
    m = DaemonMetrics()
    snap = build(many(6))
    m.set_nodes(snap, T0)
    m.set_nodes(snap, T0 + timedelta(seconds=10))
    wall_total = "tpucared_slot_wall_seconds_total"
    got = [value for name, _, value in samples(exposition(m.registry)) if name == wall_total]
    assert got == [10.0] * 6  # every slot counted, productive or not
