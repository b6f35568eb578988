"""What the runner probes: one slot's `ProbeJob`, its nodes and workers as a snapshot had them.

Made by the runner (runtime/workload/runner.py `probe_jobs`, `probe_job`) and handed to the
slots' background jobs (jobs.py) and the notice watches (notices.py). A multislice slot's job
carries the gang's stand-in node (core/workload/gang.py) and every slice as a `part`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tpucared.core.model.records import IncarnationRecord, WorkerRecord
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.vocab.snapshot import SlotKey
from tpucared.ports.launcher import Place, ProbeResult, Reply, Run


@dataclass(frozen=True)
class ProbeJob:
    """One slot to probe: its READY incarnation and workers as the snapshot had them, and
    the attempt whose run to look at there (None: no attempt on this node yet). For a
    multislice slot `inc` is the gang's stand-in and `workers` every slice's, numbered slice
    by slice (core/workload/gang.py); `parts` are the real nodes with their own workers."""

    key: SlotKey
    inc: IncarnationRecord
    attempt: int | None
    spec: WorkloadSpec
    workers: tuple[WorkerRecord, ...]
    run_id: str
    parts: tuple[tuple[IncarnationRecord, tuple[WorkerRecord, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not self.parts:  # a single node: itself
            object.__setattr__(self, "parts", ((self.inc, self.workers),))

    @property
    def run(self) -> Run:
        """The run probed, as the launcher names it."""
        return Run(self.run_id, self.attempt)


# One slice's probe: where its workers are (or why they cannot be reached) and their answers.
Answer = tuple[Place | str, list[Reply[ProbeResult]] | None]


def numbered(
    parts: Sequence[tuple[IncarnationRecord, tuple[WorkerRecord, ...]]],
) -> tuple[WorkerRecord, ...]:
    """Every slice's workers as the gang numbers them: slice by slice."""
    out: list[WorkerRecord] = []
    for _, workers in parts:
        offset = len(out)
        out += [replace(w, index=offset + i) for i, w in enumerate(workers)]
    return tuple(out)
