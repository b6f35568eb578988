"""A toy training loop that survives preemptions the way a real one should: by checkpointing.

tpucared runs it on every worker of a slice (deploy/examples/emulator.toml uploads it with
`workload.files` and runs `python3 toy_train.py`). It counts steps, one every
TOY_STEP_SECONDS, and worker 0 writes the step counter to a checkpoint after every step.
The checkpoint lives in CHECKPOINT_DIR, a directory that outlives the node (on Cloud TPU
that would be a GCS bucket; in the emulator a local directory outside the workers' homes),
under TPUCARED_RUN_ID, which tpucared keeps stable for the slot across node recreations. So
when the node is preempted and tpucared relaunches the run on a new one, the count resumes
where the last checkpoint left it instead of starting again from 0.

Every step prints `step N (attempt A)` to the run's log (`tpucared logs FLEET/SLOT`), and
worker 0 tells the daemon its progress: `step N T` and, after each checkpoint, `checkpoint N T`
(T: epoch seconds) appended to TPUCARED_PROGRESS_FILE, so `tpucared goodput` splits its startup
from training and counts the steps a preemption threw away (docs/inspecting.md, "The progress
file"). It checkpoints every TOY_CHECKPOINT_EVERY steps (default 1). The checkpoint is one
JSON file, written atomically (a preemption mid-write leaves the previous
one): {"step", "attempt", "resumed_from", "node", "updated_at", "on_notice"}.

On SIGTERM (what tpucared's watcher sends when the VM gets its preemption notice, about 30 s
before it is powered off) it saves a checkpoint at once, marked `on_notice`, prints
`checkpoint saved at step N on notice` and exits 0: the next attempt resumes from there.

Stdlib only, bounded: it stops after TOY_STEPS steps (exit 0), and at once when its
checkpoint directory is removed (a finished demo cleaning up).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def checkpoint_path() -> Path:
    root = Path(os.environ.get("CHECKPOINT_DIR") or "checkpoints")
    return root / os.environ.get("TPUCARED_RUN_ID", "local") / "state.json"


def load_step(path: Path) -> int:
    try:
        return int(json.loads(path.read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def save(path: Path, state: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def tell(line: str) -> None:
    """One line of the daemon's progress file, if it gave one (worker 0 calls it)."""
    name = os.environ.get("TPUCARED_PROGRESS_FILE")
    if name:
        with open(name, "a") as f:
            f.write(f"{line} {time.time():.3f}\n")


def state(step: int, attempt: str, start: int) -> dict[str, object]:
    return {
        "step": step,
        "attempt": int(attempt),
        "resumed_from": start,
        "node": os.environ.get("TPUCARED_NODE"),
        "updated_at": time.time(),
        "on_notice": False,
    }


def main() -> int:
    attempt = os.environ.get("TPUCARED_ATTEMPT", "1")
    worker = int(os.environ.get("TPUCARED_WORKER", "0"))
    steps = int(os.environ.get("TOY_STEPS", "3600"))
    pause = float(os.environ.get("TOY_STEP_SECONDS", "1"))
    every = max(1, int(os.environ.get("TOY_CHECKPOINT_EVERY", "1")))
    path = checkpoint_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    start = load_step(path)
    where = f"worker {worker} of {os.environ.get('TPUCARED_NODE', '?')}"
    if start:
        print(f"resumed from step {start} (attempt {attempt}, {where})", flush=True)
    else:
        print(f"starting from step 0 (attempt {attempt}, {where})", flush=True)
    step = start

    def on_notice(signum: int, frame: object) -> None:
        if worker == 0:
            save(path, {**state(step, attempt, start), "on_notice": True})
            tell(f"checkpoint {step}")
        print(f"checkpoint saved at step {step} on notice", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_notice)
    while step < steps:
        time.sleep(pause)
        if not path.parent.is_dir():
            print("checkpoint directory is gone: stopping", flush=True)
            return 0
        step += 1
        if worker == 0:
            tell(f"step {step}")
            if step % every == 0:
                save(path, state(step, attempt, start))
                tell(f"checkpoint {step}")
        print(f"step {step} (attempt {attempt})", flush=True)
    print(f"done: {steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
