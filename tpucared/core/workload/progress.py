"""What a workload tells in its progress file, and what of it to record on its attempt.

The protocol (README "Workload environment", docs/inspecting.md, issue 42 item 3): the workload may
append lines `step N` and `checkpoint N` (N an integer), optionally followed by the epoch
seconds it wrote them at (`step 120 1764370000.25`), to the file named by
TPUCARED_PROGRESS_FILE in its run directory. Anything else in the file is ignored.

Where it sits: the probe (launch/sh/probe.sh) prints, from the file's first and last few
kilobytes only, the first step's time, the last step and checkpoint with their times, and
the file's modification time; launch/scripts.py parses them into `Progress` (worker 0's
reaches the runtime on `WorkerProbe.progress`); `advance` (here, pure) says which of the
attempt's columns change; runtime/workload/progress.py writes them; the ledger
(core/ledger/tiling.py) reads them back on `WorkloadAttemptRecord`.

Times: the workload's own, when it wrote them; else the file's modification time when a probe
first saw the value (no earlier than the truth, at most one probe interval late); else the
probe's. Never after the probe nor before the attempt started (a worker's clock may be off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

# Bounds on what the probe reads and prints (launch/sh/probe.sh keeps them in step): the
# bytes read from each end of the file, and the longest line considered.
READ_BYTES = 4096
MAX_LINE = 80
MAX_VALUE = 10**15  # steps past this are garbage, not progress (and fit in a BIGINT)


@dataclass(frozen=True)
class Progress:
    """One worker's progress file as a probe read it (None: not in the file)."""

    step: int | None = None
    step_at: datetime | None = None  # as the workload wrote it
    checkpoint: int | None = None
    checkpoint_at: datetime | None = None
    first_step_at: datetime | None = None  # the file's first step, when it carries a time
    modified_at: datetime | None = None  # the file's modification time


@dataclass(frozen=True)
class Recorded:
    """What the attempt records so far (`WorkloadAttemptRecord`'s progress fields)."""

    first_step_at: datetime | None = None
    last_step: int | None = None
    last_step_at: datetime | None = None
    last_checkpoint: int | None = None
    last_checkpoint_at: datetime | None = None

    def updated(self, changes: Mapping[str, object]) -> Recorded:
        """What it records once `changes` (from `advance`) are written."""

        def at(name: str) -> datetime | None:
            value = changes.get(name, getattr(self, name))
            return value if isinstance(value, datetime) else None

        def count(name: str) -> int | None:
            value = changes.get(name, getattr(self, name))
            return value if isinstance(value, int) else None

        return Recorded(at("first_step_at"), count("last_step"), at("last_step_at"),
                        count("last_checkpoint"), at("last_checkpoint_at"))  # fmt: skip


def advance(
    recorded: Recorded, seen: Progress, observed_at: datetime, started_at: datetime
) -> dict[str, object]:
    """The attempt's progress columns that `seen` (read by a probe at `observed_at`) changes;
    empty when nothing changed. `started_at`: the attempt's start, the earliest time kept."""

    def when(told: datetime | None) -> datetime:
        at = told or seen.modified_at or observed_at
        return max(started_at, min(at, observed_at))

    out: dict[str, object] = {}
    if seen.step is not None and seen.step != recorded.last_step:
        out["last_step"] = seen.step
        out["last_step_at"] = when(seen.step_at)
    if seen.step is not None and recorded.first_step_at is None:
        first = seen.first_step_at or out.get("last_step_at") or recorded.last_step_at
        out["first_step_at"] = when(first if isinstance(first, datetime) else None)
    if seen.checkpoint is not None and seen.checkpoint != recorded.last_checkpoint:
        out["last_checkpoint"] = seen.checkpoint
        out["last_checkpoint_at"] = when(seen.checkpoint_at)
    return out
