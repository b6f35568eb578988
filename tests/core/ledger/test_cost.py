"""Chips, prices and the headline of the ledger (core/ledger/cost.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tpucared.core.ledger.categories import Category, Interval, Phase
from tpucared.core.ledger.cost import Prices, chips, generation, headline, summarize, top_causes
from tpucared.core.model.causes import LossCause

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def piece(
    start_h: float, end_h: float, category: Category, cause: LossCause | None = None
) -> Interval:
    phase = None if category in (Category.PRODUCTIVE, Category.CAPACITY_WAIT) else Phase.SETUP
    return Interval(
        T0 + timedelta(hours=start_h), T0 + timedelta(hours=end_h), category, phase, cause
    )


def test_chips_count_the_way_google_names_types() -> None:
    assert chips("v6e-8") == 8  # v6e counts chips
    assert chips("v5litepod-16") == 16
    assert chips("v4-32") == 16  # v4 counts TensorCores, two a chip
    assert chips("v5p-8") == 4
    assert chips("v2-8") == 4
    assert chips("ct6e-standard-4t") == 4  # a machine type: its -Nt suffix
    assert chips("tpu7x-standard-4t") == 4
    assert chips("mystery") is None
    assert generation("v6e-8") == "v6e"
    assert generation("ct6e-standard-4t") == "v6e"
    assert generation("v5litepod-4") == "v5litepod"


def test_the_most_specific_price_wins_and_nothing_is_guessed() -> None:
    prices = Prices({("v6e", "spot"): 1.0, ("v6e-8", "spot"): 2.0})
    assert prices.per_chip_hour("v6e-8", "spot") == 2.0
    assert prices.per_chip_hour("v6e-16", "spot") == 1.0
    assert prices.per_chip_hour("v6e-8", "on-demand") is None
    assert prices.per_chip_hour("v5p-8", "spot") is None
    assert Prices().per_chip_hour("v6e-8", "spot") is None


def test_cost_is_chip_hours_times_price_and_the_headline_names_the_biggest_losses() -> None:
    intervals = [
        piece(0, 2, Category.CAPACITY_WAIT),
        piece(2, 10, Category.PRODUCTIVE),
        piece(10, 11, Category.RECOVERY, LossCause.PREEMPTED),
        piece(11, 12, Category.PRODUCTIVE),
    ]
    s = summarize("f", 0, intervals, chips=8, price=0.5)
    assert s.total_s == 12 * 3600
    assert s.lost_s == 3 * 3600
    assert s.share == 0.75
    assert s.dollars(s.total_s) == 12 * 8 * 0.5
    assert s.causes == {LossCause.PREEMPTED: 3600}  # a first create's wait has no cause
    assert top_causes([s]) == [(LossCause.PREEMPTED, 3600.0)]
    assert headline([s], "2026-11-01") == (
        "$12.00 of $48.00 since 2026-11-01 was lost: $8.00 capacity waits, "
        "$4.00 disruption recovery"
    )
    unpriced = summarize("f", 1, intervals, chips=8)
    assert headline([s, unpriced], "x").endswith("(1 slot without a price or chip count)")
    assert headline([unpriced], "x").startswith(
        "24.0 of 96.0 chip-hours since x were lost: 16.0 chip-hours capacity waits"
    )
