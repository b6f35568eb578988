"""Chip-hours and dollars: what a slot's ledger cost, per category, and the headline.

Chips per node come from the type's name, the way Google counts them: a Compute Engine
machine type's `-Nt` suffix (core/model/machines.py); a TPU API accelerator type's number,
which counts TensorCores (2 per chip) for v2, v3, v4, v5p and tpu7x, and chips for v5litepod
(v5e) and v6e (the same convention as emulator/topology.py; docs/research/compute-engine.md §1).

Prices are the config's `[prices]`, in $ per chip-hour per type (or generation) and capacity
kind; there are no built-in defaults (docs/inspecting.md, "Prices", says why), so a type
nobody priced is shown in chip-hours only, never with a guessed price. The cost of a category
is its chip-hours times the price: what that time of the slot costs at list price. The cloud
bills a TPU only while it is READY (cloud.google.com/tpu/pricing: "Charges for Cloud TPU
accrue while your TPU node is in a READY state"), so the dollars of a capacity wait are the
price of the time lost waiting, not a line of the bill.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tpucared.core.ledger.categories import LOST, Category, Interval, Phase
from tpucared.core.ledger.kept import KeptSums, microseconds
from tpucared.core.model.causes import LossCause
from tpucared.core.model.machines import MACHINE_TYPES, chips_of

# The categories a loss starts: the time its cause cost (a stockout at the first create, a
# hold or idle time has no loss, hence no cause).
FROM_LOSSES = frozenset(
    {
        Category.RECOVERY,
        Category.MAINTENANCE,
        Category.BAD_HOST,
        Category.CRASH_RESTART,
        Category.WASTED,
    }
)

# TPU API generations whose accelerator type counts TensorCores, two to a chip.
_COUNTS_CORES = frozenset({"v2", "v3", "v4", "v5p", "tpu7x"})
_CORES_PER_CHIP = 2


def generation(accelerator_type: str) -> str:
    """ "v6e" of "v6e-8" and of "ct6e-standard-4t"; the name itself when it has no number."""
    machine = MACHINE_TYPES.get(accelerator_type)
    if machine is not None:
        return machine.generation.lower()
    prefix, _, count = accelerator_type.rpartition("-")
    return prefix if prefix and count.isdigit() else accelerator_type


def chips(accelerator_type: str) -> int | None:
    """TPU chips of one node of the type; None for a name that does not say."""
    per_vm = chips_of(accelerator_type)
    if per_vm is not None:
        return per_vm
    prefix, _, count = accelerator_type.rpartition("-")
    if not prefix or not count.isdigit() or int(count) == 0:
        return None
    n = int(count)
    return max(1, n // _CORES_PER_CHIP) if prefix in _COUNTS_CORES else n


@dataclass(frozen=True)
class Prices:
    """$ per chip-hour, by (type, capacity kind): the type is an accelerator type ("v6e-8"),
    a machine type ("ct6e-standard-4t") or a generation ("v6e"); the most specific wins."""

    table: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def per_chip_hour(self, accelerator_type: str, capacity: str) -> float | None:
        for key in (accelerator_type, generation(accelerator_type)):
            price = self.table.get((key, capacity))
            if price is not None:
                return price
        return None


@dataclass(frozen=True)
class SlotSummary:
    """One slot's ledger summed: seconds per category, per (category, phase), lost seconds
    per cause, and what a second of the slot costs (None: unpriced, or chips unknown)."""

    fleet: str
    slot: int
    seconds: Mapping[Category, float]
    phases: Mapping[tuple[Category, Phase | None], float]
    causes: Mapping[LossCause | None, float]
    chips: int | None = None
    price: float | None = None  # $ per chip-hour
    steps_lost: int = 0  # the wasted progress's steps, where the progress file told them

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def lost_s(self) -> float:
        return sum(s for c, s in self.seconds.items() if c in LOST)

    @property
    def share(self) -> float:
        """Productive share of the wall time (0 with no time)."""
        total = self.total_s
        return self.seconds.get(Category.PRODUCTIVE, 0.0) / total if total > 0 else 0.0

    def chip_hours(self, seconds: float) -> float | None:
        return None if self.chips is None else seconds / 3600 * self.chips

    def dollars(self, seconds: float) -> float | None:
        hours = self.chip_hours(seconds)
        return None if hours is None or self.price is None else hours * self.price


def summarize(
    fleet: str,
    slot: int,
    intervals: Iterable[Interval],
    *,
    chips: int | None = None,
    price: float | None = None,
    kept: KeptSums | None = None,
) -> SlotSummary:
    """The intervals (and `kept`, the slot's kept days: kept.py) summed. In integer
    microseconds, turned into seconds at the end: a sum is the same however the time was cut
    (whole intervals, or days kept and a tail), to the last bit."""
    seconds: dict[Category, int] = defaultdict(int)
    phases: dict[tuple[Category, Phase | None], int] = defaultdict(int)
    causes: dict[LossCause | None, int] = defaultdict(int)
    steps = 0
    parts: list[tuple[Category, Phase | None, LossCause | None, int, int]] = [
        (c, p, cause, us, n) for (c, p, cause), (us, n) in (kept or {}).items()
    ]
    parts += [
        (i.category, i.phase, i.cause, microseconds(i.start, i.end), i.steps or 0)
        for i in intervals
    ]
    for category, phase, cause, us, n in parts:
        seconds[category] += us
        phases[(category, phase)] += us
        if category in FROM_LOSSES:
            causes[cause] += us
        steps += n  # one interval a loss: `merged` joins its pieces
    return SlotSummary(
        fleet,
        slot,
        {c: us / 1e6 for c, us in seconds.items()},
        {k: us / 1e6 for k, us in phases.items()},
        {c: us / 1e6 for c, us in causes.items()},
        chips,
        price,
        steps,
    )


def combined(
    fleet: str, summaries: Iterable[SlotSummary], *, chips: int | None, price: float | None
) -> SlotSummary:
    """Slots of one fleet summed as one summary (slot -1): they share chips and price."""
    seconds: dict[Category, float] = defaultdict(float)
    phases: dict[tuple[Category, Phase | None], float] = defaultdict(float)
    causes: dict[LossCause | None, float] = defaultdict(float)
    items = list(summaries)
    for summary in items:
        for category, s in summary.seconds.items():
            seconds[category] += s
        for key, s in summary.phases.items():
            phases[key] += s
        for cause, s in summary.causes.items():
            causes[cause] += s
    steps = sum(s.steps_lost for s in items)
    return SlotSummary(fleet, -1, dict(seconds), dict(phases), dict(causes), chips, price, steps)


def top_causes(
    summaries: Iterable[SlotSummary], n: int = 3
) -> list[tuple[LossCause | None, float]]:
    """The loss causes that cost the most seconds, most first (None: a loss whose cause
    nothing recorded)."""
    total: dict[LossCause | None, float] = defaultdict(float)
    for summary in summaries:
        for cause, s in summary.causes.items():
            total[cause] += s
    ranked = sorted(total.items(), key=lambda kv: (-kv[1], str(kv[0])))
    return [(c, s) for c, s in ranked if s > 0][:n]


HEADLINE_WORDS: dict[Category, str] = {
    Category.PROGRAM_STARTUP: "program startup",
    Category.WASTED: "wasted progress",
    Category.CAPACITY_WAIT: "capacity waits",
    Category.RECOVERY: "disruption recovery",
    Category.STARTUP: "startup",
    Category.MAINTENANCE: "maintenance",
    Category.BAD_HOST: "bad hosts",
    Category.CRASH_RESTART: "crash restarts",
    Category.HELD: "held",
    Category.IDLE: "idle",
}


def headline(summaries: Iterable[SlotSummary], since: str) -> str:
    """ "$X of $Y since SINCE was lost: $a capacity waits, $b disruption recovery, ..." over
    the priced slots; in chip-hours when none is priced; says how many slots are unpriced."""
    items = list(summaries)
    priced = [s for s in items if s.dollars(0.0) is not None]
    if priced:
        unit, pick = "$", priced
        amount = _dollars
    else:
        unit, pick = "chip-hours", [s for s in items if s.chips is not None]
        amount = _chip_hours
    total = sum(amount(s, s.total_s) for s in pick)
    lost = sum(amount(s, s.lost_s) for s in pick)
    parts = []
    for category in LOST:
        value = sum(amount(s, s.seconds.get(category, 0.0)) for s in pick)
        if value > 0:
            parts.append((value, category))
    parts.sort(key=lambda p: -p[0])
    fmt = money if unit == "$" else _hours
    if unit == "$":
        text = f"{money(lost)} of {money(total)} since {since} was lost"
    else:
        text = f"{lost:,.1f} of {_hours(total)} since {since} were lost"
    if parts:
        text += ": " + ", ".join(f"{fmt(v)} {HEADLINE_WORDS[c]}" for v, c in parts)
    unpriced = len(items) - len(pick)
    if unpriced:
        text += f" ({unpriced} slot{'s' if unpriced != 1 else ''} without a price or chip count)"
    return text


def _dollars(summary: SlotSummary, seconds: float) -> float:
    return summary.dollars(seconds) or 0.0


def _chip_hours(summary: SlotSummary, seconds: float) -> float:
    return summary.chip_hours(seconds) or 0.0


def money(value: float) -> str:
    """$1,930 (whole dollars from $100; cents below)."""
    return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"


def _hours(value: float) -> str:
    return f"{value:,.1f} chip-hours"
