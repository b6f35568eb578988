"""Pure timing pieces: backoff arithmetic, the stuck-state table, human durations."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpucared.core.model import durations
from tpucared.core.model.backoff import BackoffRule, ceiling, delay, jitter, shortest
from tpucared.core.model.observed import QueuedPhase, StateClass
from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import ErrorKind
from tpucared.core.vocab.policy import CAPACITY_BACKOFF, HARD_ERRORS, Policy
from tpucared.core.vocab.stuck import (
    DEFAULT_TIMEOUTS,
    PHASE_RULE,
    QUEUED_RULE,
    STUCK_RULES,
    with_overrides,
)
from tpucared.gcp.tpu.states import NODE_STATES, QUEUED_PHASES, NodeState, QueuedState

S = timedelta(seconds=1)
RULE = BackoffRule(base=5 * S, cap=30 * S)


@pytest.mark.parametrize(
    ("attempt", "top"),
    [(0, 5), (1, 5), (2, 10), (3, 20), (4, 30), (5, 30), (10**6, 30)],
)
def test_ceiling_doubles_then_caps(attempt: int, top: int) -> None:
    assert ceiling(RULE, attempt) == top * S


@pytest.mark.parametrize(("u", "expected"), [(0.0, 0), (0.5, 10), (0.999, 19.98)])
def test_full_jitter_spans_zero_to_ceiling(u: float, expected: float) -> None:
    assert delay(RULE, 3, u) == timedelta(seconds=expected)


def test_floor_keeps_long_backoff_long() -> None:
    rule = BackoffRule(base=600 * S, cap=1800 * S, floor=600 * S)
    assert delay(rule, 1, 0.0) == delay(rule, 1, 0.99) == 600 * S
    assert delay(rule, 3, 0.0) == 600 * S
    assert delay(rule, 3, 0.5) == 1200 * S


@given(st.integers(min_value=0, max_value=10**9), st.floats(min_value=0, max_value=0.999999))
def test_delay_is_bounded(attempt: int, u: float) -> None:
    d = delay(RULE, attempt, u)
    assert timedelta(0) <= d <= RULE.cap


@pytest.mark.parametrize("u", [-0.1, 1.0, float("nan")])
def test_jitter_must_be_a_unit_fraction(u: float) -> None:
    with pytest.raises(ValueError, match="jitter"):
        delay(RULE, 1, u)


@pytest.mark.parametrize(
    ("base", "cap", "floor"), [(0, 1, 0), (10, 5, 0), (5, 30, 40), (5, 30, -1)]
)
def test_bad_rules_are_refused(base: int, cap: int, floor: int) -> None:
    with pytest.raises(ValueError, match="backoff"):
        BackoffRule(base=base * S, cap=cap * S, floor=floor * S)


@pytest.mark.parametrize("share", [-0.1, 1.01, float("nan"), float("inf")])
def test_jitter_share_must_be_a_fraction(share: float) -> None:
    with pytest.raises(ValueError, match="jitter"):
        BackoffRule(base=5 * S, cap=30 * S, jitter=share)


# ---- the jittered share: capacity hunting waits near its ceiling

NEAR = BackoffRule(base=4 * S, cap=4 * S, jitter=0.4)


@pytest.mark.parametrize(
    ("rule", "attempt", "u", "seconds"),
    [
        (NEAR, 1, 0.0, 2.4),
        (NEAR, 1, 0.5, 3.2),
        (NEAR, 7, 0.75, 3.6),
        (NEAR, 10**6, 0.0, 2.4),
        # Doubling still applies under a share: ceilings 5, 10, 20, 30 s.
        (BackoffRule(base=5 * S, cap=30 * S, jitter=0.5), 1, 0.0, 2.5),
        (BackoffRule(base=5 * S, cap=30 * S, jitter=0.5), 3, 0.5, 15.0),
        (BackoffRule(base=5 * S, cap=30 * S, jitter=0.5), 9, 0.0, 15.0),
        # No jitter: exactly the ceiling, whatever u.
        (BackoffRule(base=5 * S, cap=30 * S, jitter=0.0), 2, 0.0, 10.0),
        (BackoffRule(base=5 * S, cap=30 * S, jitter=0.0), 2, 0.9, 10.0),
        # A floor above the jitter's low end still holds (the error backoff's shape).
        (BackoffRule(base=600 * S, cap=1800 * S, floor=600 * S, jitter=0.2), 2, 0.0, 960.0),
        (BackoffRule(base=600 * S, cap=1800 * S, floor=600 * S, jitter=0.8), 1, 0.0, 600.0),
    ],
)
def test_jitter_share(rule: BackoffRule, attempt: int, u: float, seconds: float) -> None:
    assert delay(rule, attempt, u) == timedelta(seconds=seconds)


rules = st.builds(
    lambda base, extra, floor_share, share: BackoffRule(
        base=timedelta(seconds=base),
        cap=timedelta(seconds=base + extra),
        floor=timedelta(seconds=(base + extra) * floor_share),
        jitter=share,
    ),
    st.floats(min_value=0.001, max_value=3600),
    st.floats(min_value=0, max_value=3600),
    st.floats(min_value=0, max_value=1),
    st.floats(min_value=0, max_value=1),
)


@given(
    rules,
    st.integers(min_value=0, max_value=10**9),
    st.floats(min_value=0, max_value=0.999999),
    st.floats(min_value=0, max_value=0.999999),
)
def test_every_delay_lies_in_its_window_and_grows_with_u(
    rule: BackoffRule, attempt: int, u: float, v: float
) -> None:
    # The floor wins over an early ceiling below it (the error backoff: never before 10 min).
    low, high = shortest(rule, attempt), max(ceiling(rule, attempt), rule.floor)
    assert rule.floor <= low <= high <= rule.cap
    # timedelta keeps microseconds: allow one of rounding at either end.
    tick = timedelta(microseconds=1)
    d, e = delay(rule, attempt, u), delay(rule, attempt, v)
    assert low - tick <= d <= high + tick
    assert (d <= e + tick) if u <= v else (e <= d + tick)
    # The random share is at most `jitter` of the ceiling.
    assert high - low <= high * rule.jitter + tick


@given(st.integers(min_value=1, max_value=64), st.floats(min_value=0, max_value=0.999999))
def test_a_share_of_one_is_the_old_full_jitter(attempt: int, u: float) -> None:
    full = BackoffRule(base=5 * S, cap=30 * S, jitter=1.0)
    assert delay(full, attempt, u) == ceiling(full, attempt) * u


def test_the_default_capacity_wait_is_near_constant_and_still_spread() -> None:
    rule = Policy().capacity_backoff
    assert rule is CAPACITY_BACKOFF
    waits = [
        delay(rule, n, jitter("sweep", slot, "run", n)) for slot in range(64) for n in (1, 5, 50)
    ]
    assert all(timedelta(seconds=3.6) <= w <= timedelta(seconds=4) for w in waits)
    # Slots of a fleet do not retry in step: their waits cover most of the 0.4 s window.
    assert max(waits) - min(waits) > timedelta(seconds=0.35)


def _residual(overhead: float, low: float, high: float) -> float:
    """Expected wait from a random instant to the next retry of a renewal process whose
    cycle is `overhead` + uniform(low, high) seconds: E[C^2] / 2E[C]."""
    mean = overhead + (low + high) / 2
    return ((high - low) ** 2 / 12 + mean**2) / (2 * mean)


def test_near_constant_waits_beat_full_jitter_at_the_same_request_rate() -> None:
    """Why capacity hunting does not use full jitter: with the same mean cycle (so the same
    requests per minute), full jitter's long draws make the expected wait for capacity that
    comes back at a random moment longer. The wait runs from one create's post to the next,
    so the cycle is the wait itself while the API fails a create sooner than that (the
    emulator's 2 s operation)."""
    rule = CAPACITY_BACKOFF
    low, high = shortest(rule, 9).total_seconds(), ceiling(rule, 9).total_seconds()
    near = _residual(0.0, low, high)
    full = _residual(0.0, 0.0, low + high)  # full jitter with the same mean cycle
    assert near < 0.8 * full
    # ... and a shorter worst case: the longest cycle (4 s, not 7.6 s).
    assert high < 0.6 * (low + high)
    assert near < 2.0  # half the tight loop's ~4.5 s cycle (bench/replay.py)
    old = _residual(3.5, 0.0, 30.0)  # the first default: 0-30 s after a 3.5 s notice
    assert old > 5 * near


def test_jitter_is_stable_and_spread() -> None:
    assert jitter("sweep", 3, 1) == jitter("sweep", 3, 1)
    values = {jitter("sweep", slot, 1) for slot in range(200)}
    assert len(values) == 200
    assert all(0 <= v < 1 for v in values)
    assert min(values) < 0.1
    assert max(values) > 0.9


@pytest.mark.parametrize(
    ("kind", "rule"),
    [
        (ErrorKind.CAPACITY, "capacity_backoff"),
        (ErrorKind.QUOTA, "error_backoff"),
        (ErrorKind.PERMISSION, "error_backoff"),
        (ErrorKind.INVALID, "error_backoff"),
        (ErrorKind.NOT_FOUND, "error_backoff"),
        (ErrorKind.TRANSIENT, "transient_backoff"),
        (ErrorKind.RATE_LIMITED, "transient_backoff"),
        (ErrorKind.CONFLICT, "transient_backoff"),
        (ErrorKind.ALREADY_EXISTS, "transient_backoff"),
    ],
)
def test_backoff_per_error_kind(kind: ErrorKind, rule: str) -> None:
    policy = Policy()
    assert policy.backoff_for(kind) is getattr(policy, rule)
    assert (kind in HARD_ERRORS) is (rule == "error_backoff")


# ---- the stuck-state table


def test_stuck_rules_have_unique_names_and_say_what_happens() -> None:
    names = [r.name for r in STUCK_RULES]
    assert len(names) == len(set(names))
    assert all(r.situation and r.then for r in STUCK_RULES)


def test_every_transient_cloud_state_is_timed() -> None:
    # The TPU API's one state table (gcp/tpu/states.py): every state is in it, each
    # transient one (being created included) names a rule of [policy.timeouts], no other does.
    assert set(NODE_STATES) == set(NodeState)
    transient = {StateClass.CREATING, StateClass.TRANSIENT}
    timed = {state: rule for state, (cls, rule) in NODE_STATES.items() if rule is not None}
    transient_states = {state for state, (cls, _) in NODE_STATES.items() if cls in transient}
    dead_states = {state for state, (cls, _) in NODE_STATES.items() if cls is StateClass.DEAD}
    assert set(timed) == transient_states
    assert set(timed.values()) <= set(DEFAULT_TIMEOUTS)
    assert not transient_states & dead_states
    untimed = set(NodeState) - transient_states - dead_states
    # UNRECOGNIZED (a state we could not read) is never timed: it is never acted on.
    assert untimed == {NodeState.READY, NodeState.DELETING, NodeState.UNRECOGNIZED}


def test_every_waiting_queued_state_is_timed() -> None:
    assert set(QUEUED_RULE.values()) <= set(DEFAULT_TIMEOUTS)
    assert set(QUEUED_RULE) == set(QueuedPhase) - {QueuedPhase.DEAD, QueuedPhase.DELETING}


def test_every_queued_state_of_the_tpu_api_has_a_phase() -> None:
    assert set(QUEUED_PHASES) == set(QueuedState)
    dead = {s for s, phase in QUEUED_PHASES.items() if phase is QueuedPhase.DEAD}
    assert dead == {QueuedState.FAILED, QueuedState.SUSPENDING, QueuedState.SUSPENDED}


def test_pending_and_deleting_phases_are_timed() -> None:
    assert set(PHASE_RULE) == {NodePhase.REQUESTED, NodePhase.CREATING, NodePhase.DELETING}
    for rule in PHASE_RULE.values():
        assert DEFAULT_TIMEOUTS[rule] is not None


def test_queue_waits_forever_by_default() -> None:
    assert DEFAULT_TIMEOUTS["queued"] is None


def test_overrides() -> None:
    table = with_overrides({"creating": 45 * 60 * S, "repairing": None})
    assert table["creating"] == 45 * 60 * S
    assert table["repairing"] is None
    assert table["deleting"] == DEFAULT_TIMEOUTS["deleting"]
    with pytest.raises(ValueError, match="creatin"):
        with_overrides({"creatin": S})


# ---- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("10m", 600),
        ("24h", 86400),
        ("1h30m", 5400),
        ("2d", 172800),
        ("500ms", 0.5),
        ("1.5h", 5400),
        (" 0s ", 0),
    ],
)
def test_parse(text: str, seconds: float) -> None:
    assert durations.parse(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "s", "1x", "-5s", "1h 30m", "10 m", "400d"])
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        durations.parse(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.25, "250ms"),
        (45, "45s"),
        (600, "10m"),
        (750, "12m30s"),
        (3900, "1h05m"),
        (7200, "2h"),
        (183600, "2d3h"),
        (-30, "-30s"),
    ],
)
def test_fmt(seconds: float, text: str) -> None:
    assert durations.fmt(timedelta(seconds=seconds)) == text


@given(st.integers(min_value=0, max_value=300 * 86400))
def test_fmt_reads_back(seconds: int) -> None:
    back = durations.parse(durations.fmt(timedelta(seconds=seconds)))
    # Days drop minutes and hours drop seconds: what is lost is below the shown unit.
    assert abs(back.total_seconds() - seconds) < 3600
