"""bench/scale.py's settings: what one run measures, and its full and quick defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.scale_fleet import TYPE
from bench.scale_storm import StormSettings

VARIANTS = ("none", "probe", "storm")
PROBE_SETTLE_S = 30.0


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]
    variants: tuple[str, ...]
    ticks: int  # T: ticks in the measurement window
    poll_interval: float  # seconds
    settle_ticks: int = 2  # no-action ticks in a row that mean "steady"
    # Probe variant sizes to try (the machine may not hold 10,000 SSH servers: see run()).
    probe_sizes: tuple[int, ...] | None = None
    # Run the daemon from another source tree (a copy taken before a change): before/after.
    daemon_path: Path | None = None
    profile: bool = False  # cProfile the daemon over the window (diagnostic, see above)
    # Diagnostic: the daemon with gc.set_threshold(N) (first generation), to measure what the
    # cyclic garbage collector costs at scale. None: Python's default (700).
    gc_threshold: int | None = None
    # Seconds a measurement may take to converge before it is reported as failed (with how
    # far it got); None: a budget that grows with the size.
    converge_limit: float | None = None
    # Every node's type: v5litepod-8 is one worker per slice, v5litepod-16 four.
    accelerator_type: str = TYPE
    # Storm variant: the recovery wait, the emulator's create quota and time, the daemon's
    # policy (bench/scale_storm.py).
    storm: StormSettings = field(default_factory=StormSettings)
    api: str = "tpu"  # or "compute": Compute Engine fleets (bench/scale_api.py)
    keep_logs: Path | None = None  # copy each run's daemon and emulator logs here (diagnostic)
    db: str = "sqlite"  # or "postgresql": the daemon's database (bench/scale_db.py)


FULL = Settings(sizes=(1000, 10000), variants=VARIANTS, ticks=30, poll_interval=2.0)
QUICK = Settings(sizes=(200,), variants=("none",), ticks=6, poll_interval=1.0)
