"""The `[prices]` table (config/prices.py): what loads, and one line per mistake."""

from __future__ import annotations

from pathlib import Path

import config_support

from tpucared.core.ledger.cost import Prices


def test_no_prices_prices_nothing(tmp_path: Path) -> None:
    config = config_support.load(tmp_path, config_support.MINIMAL)
    assert config.prices == Prices()
    assert config.prices.per_chip_hour("v6e-8", "spot") is None


def test_prices_by_generation_type_and_capacity_kind(tmp_path: Path) -> None:
    text = config_support.MINIMAL + (
        "\n[prices.v6e]\nspot = 1\non-demand = 2.5\n"
        '\n[prices."ct6e-standard-4t"]\nflex-start = 0.75\n'
    )
    prices = config_support.load(tmp_path, text).prices
    assert prices.per_chip_hour("v6e-8", "spot") == 1.0
    assert prices.per_chip_hour("v6e-16", "on-demand") == 2.5
    assert prices.per_chip_hour("ct6e-standard-4t", "flex-start") == 0.75
    assert prices.per_chip_hour("ct6e-standard-4t", "spot") == 1.0  # its generation's
    assert prices.per_chip_hour("v5p-8", "spot") is None


def test_a_wrong_kind_or_price_is_one_line_each(tmp_path: Path) -> None:
    text = config_support.MINIMAL + "\n[prices.v6e]\ncheap = 1\nspot = -1\n"
    assert config_support.problems(tmp_path, text) == [
        "prices.v6e.cheap: expected a capacity kind "
        "(spot, preemptible, on-demand, reserved, flex-start)",
        "prices.v6e.spot: expected a price of 0 or more ($ per chip-hour)",
    ]
