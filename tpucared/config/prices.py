"""The `[prices]` table: $ per chip-hour, by type and capacity kind, for `tpucared goodput`.

    [prices.v6e]            # a generation, an accelerator type ("v6e-8") or a machine type
    spot = 0.54             # a capacity kind: spot, preemptible, on-demand, reserved, flex-start
    on-demand = 2.70

Nothing is priced unless the file says so (core/ledger/cost.py, docs/inspecting.md "Prices"):
a missing price shows chip-hours only, never a guessed dollar figure. Pass one (`PRICES`, in
the schema) takes a table of tables of numbers; pass two (`build_prices`) checks the kinds and
the numbers and makes the core's `Prices`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tpucared.config.problems import Problems
from tpucared.config.syntax import NonEmpty
from tpucared.core.ledger.cost import Prices
from tpucared.core.model.specs import CapacityKind

# The schema's type of `prices`: type -> capacity kind -> $ per chip-hour.
PricesTable = dict[NonEmpty, dict[NonEmpty, float]]

_KINDS = tuple(k.value for k in CapacityKind)


def build_prices(raw: Mapping[str, Mapping[str, float]], problems: Problems) -> Prices:
    table: dict[tuple[str, str], float] = {}
    for type_name, kinds in raw.items():
        for kind, price in kinds.items():
            at = f"prices.{type_name}.{kind}"
            if kind not in _KINDS:
                problems.add(at, f"expected a capacity kind ({', '.join(_KINDS)})")
            elif not math.isfinite(price) or price < 0:
                problems.add(at, "expected a price of 0 or more ($ per chip-hour)")
            else:
                table[(type_name, kind)] = float(price)
    return Prices(table)
