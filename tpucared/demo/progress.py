"""What the toy workload has achieved: its checkpoints, read from the demo's "bucket".

deploy/examples/toy_train.py writes `CHECKPOINT_DIR/<TPUCARED_RUN_ID>/state.json` after every
step (worker 0 only, atomically). Its run id is the slot's, stable across node recreations,
so one file per slot tells how far the slot's training got and where its current attempt
resumed from. Reading a file the workload is replacing is safe (rename is atomic); a missing
or half-written one just means "no progress yet".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

STATE_FILE = "state.json"


@dataclass(frozen=True)
class Progress:
    step: int  # the last step checkpointed
    attempt: int  # TPUCARED_ATTEMPT of the run that wrote it
    resumed_from: int  # the step that attempt started from (0: from scratch)
    node: str | None
    on_notice: bool = False  # saved by the workload on its preemption notice (SIGTERM)


def read_progress(checkpoints: Path, run_id: str) -> Progress | None:
    try:
        data = json.loads((checkpoints / run_id / STATE_FILE).read_text(encoding="utf-8"))
        return Progress(
            step=int(data["step"]),
            attempt=int(data["attempt"]),
            resumed_from=int(data.get("resumed_from") or 0),
            node=data.get("node"),
            on_notice=bool(data.get("on_notice")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
