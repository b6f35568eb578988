"""The preemption notice: notice -> SIGTERM on every worker, and -> the replacement's create.

`python -m bench.run --only notice [--quick]` (or `python -m bench.notice [--quick]`).

Method. As bench/recovery.py: the emulator in this process (its own thread) with simulated
SSH worker hosts, the real `python -m tpucared run` daemon with one v4-32 spot slot (4
workers) and a workload that records its attempt's start instant per worker and, on SIGTERM,
the instant it got it (`date +%s.%N`), then exits 0 (a checkpoint taking no time). Every
instant is this machine's clock: the emulator's (the notice, each request's arrival in its
request log) and the workers' stamps.

Two paths, in one run, alternating sample by sample:

  notice   the node gets a notice of NOTICE_S (30 s, what Compute Engine gives a spot VM)
           through `:preempt {"notice_seconds": 30}`: it stays READY, the workers' metadata
           servers say `instance/preempted` TRUE at once, and it is preempted 30 s later.
           Measured from the notice: `sigterm_last` (the last worker's workload got
           SIGTERM), `delete` (the daemon's DELETE arrives), `create` (the replacement's
           create arrives), `running` (the next attempt started on all 4 workers).
  today    what a babysitter without the notice sees: nothing until the VM is gone and the
           API says PREEMPTED, 30 s after the notice. The node is preempted without notice
           and the same instants are measured from that moment; `from_notice` adds the
           30 s the notice would have given (the workload gets no signal at all: it is
           killed mid-step).

Statistics over a handful of samples (bench/common.py): quote the median; the target for
`sigterm_last` is a p99 of 1 s.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import common, recovery

NOTICE_S = 30.0
TARGET_SIGTERM_P99_S = 1.0
POLL_S = 10.0
WORKERS = recovery.WORKERS
NODE = recovery.NODE

# Starts, then waits; on SIGTERM records when it got it and exits 0. `wait` returns at once
# on a trapped signal (a plain `sleep` in the foreground would delay the trap).
RUN = (
    'echo "$TPUCARED_ATTEMPT $(date +%s.%N)" >> "$RESULTS/starts-$TPUCARED_WORKER"; '
    'trap \'echo "$TPUCARED_ATTEMPT $(date +%s.%N)" >> "$RESULTS/terms-$TPUCARED_WORKER"; '
    "exit 0' TERM; "
    "while :; do sleep 1000 & wait $!; done"
)
PATHS = ("notice", "today")
MEASURES = ("sigterm_last", "delete", "create", "running")


def terms(results: Path, attempt: int) -> float | None:
    """When the last worker's run of `attempt` got SIGTERM, or None."""
    stamps = []
    for worker in range(WORKERS):
        path = results / f"terms-{worker}"
        found = [
            float(parts[1])
            for parts in (
                line.split() for line in (path.read_text() if path.exists() else "").split("\n")
            )
            if len(parts) == 2 and int(parts[0]) == attempt
        ]
        if not found:
            return None
        stamps.append(found[0])
    return max(stamps)


def _first(requests: list[dict[str, Any]], method: str, after: float) -> float:
    times = [
        r["time"]
        for r in requests
        if r["method"] == method and recovery._node_of(r) == NODE and r["time"] >= after
        and r["status"] == 200
    ]  # fmt: skip
    if not times:
        raise RuntimeError(f"benchmark: no {method} of {NODE} after {after}")
    return min(times)


def sample(cloud: recovery.Cloud, results: Path, attempt: int, path: str) -> dict[str, float]:
    if path == "notice":
        t0 = cloud.thread.call(
            lambda s: (s.preempt(recovery.PROJECT, recovery.ZONE, NODE, NOTICE_S), s.now())[1]
        )
    else:
        t0 = cloud.preempt(NODE)
    running = common.wait_until(
        lambda: recovery.running_everywhere(results, attempt + 1),
        180,
        f"attempt {attempt + 1} on every worker",
    )
    requests = cloud.requests(t0 - 0.001)
    deleted = _first(requests, "DELETE", t0)
    row = {
        "delete": deleted - t0,
        "create": _first(requests, "POST", deleted) - t0,
        "running": running - t0,
    }
    if path == "notice":
        last = terms(results, attempt)
        if last is not None:
            row["sigterm_last"] = last - t0
    else:
        row.update({f"{k}_from_notice": row[k] + NOTICE_S for k in ("delete", "create", "running")})
    return row


def run(
    quick: bool,
    *,
    progress: Callable[[str], None] = print,
    scratch: Path | None = None,
    samples: int | None = None,
    poll: float = POLL_S,
) -> dict[str, Any]:
    """`samples` per path (default 2 quick, 8 in full); `poll`: the daemon's interval."""
    n = samples or (2 if quick else 8)
    settings = recovery.Settings(samples={poll: n}, create_seconds=4.0, delete_seconds=1.0)
    rng = random.Random(20261125)
    rows: dict[str, list[dict[str, float]]] = {p: [] for p in PATHS}
    with tempfile.TemporaryDirectory(prefix="tpucared-bench-notice-") as tmp:
        where = scratch or Path(tmp)
        with recovery.Cloud(settings, where / "hosts") as cloud:
            cloud.reset(settings.create_seconds)
            results = where / "results"
            results.mkdir(parents=True)
            daemon = recovery.DaemonProcess(
                where / "daemon", cloud, poll=poll, results=results, run=RUN,
                workload='stop_grace = "25s"',
            )  # fmt: skip
            try:
                common.wait_until(
                    lambda: recovery.running_everywhere(results, 1), 120, "attempt 1 everywhere"
                )
                for i in range(n):
                    for path in PATHS if i % 2 == 0 else PATHS[::-1]:
                        attempt = recovery.newest_attempt(results)
                        # A random moment of the poll cycle, after the launch settled.
                        time.sleep(1.0 + rng.random() * poll)
                        row = sample(cloud, results, attempt, path)
                        rows[path].append(row)
                        progress(
                            f"notice {path} sample {i + 1}/{n}: "
                            + ", ".join(f"{k} {v:.2f}" for k, v in row.items())
                        )
            finally:
                daemon.stop()
    summary = {
        p: {k: common.summarize([r[k] for r in rs if k in r]) for k in sorted({*rs[0]})}
        for p, rs in rows.items()
        if rs
    }
    sigterm = summary.get("notice", {}).get("sigterm_last", {})
    return {
        "method": __doc__.split("Method.", 1)[1].split("Statistics")[0].strip() if __doc__ else "",
        "parameters": {
            "notice_s": NOTICE_S,
            "poll_interval_s": poll,
            "emulator_create_seconds": settings.create_seconds,
            "emulator_delete_seconds": settings.delete_seconds,
            "accelerator_type": recovery.TYPE,
            "samples_per_path": n,
        },
        "summary_s": summary,
        "sigterm_p99_target_s": TARGET_SIGTERM_P99_S,
        "sigterm_p99_within_target": bool(sigterm) and sigterm["p99"] <= TARGET_SIGTERM_P99_S,
        "raw": rows,
    }


def render(result: Mapping[str, Any]) -> str:
    rows = []
    for path, measures in result["summary_s"].items():
        for name, s in measures.items():
            rows.append(
                [
                    path,
                    name,
                    *common.summary_cells(s, ("median", "p99", "max")),
                ]
            )
    params = result["parameters"]
    title = (
        f"notice {params['notice_s']:g}s, poll {params['poll_interval_s']:g}s, create "
        f"{params['emulator_create_seconds']:g}s, {params['accelerator_type']}; seconds "
        "from the notice (notice) or from the preemption without one (today)"
    )
    headers = ["path", "measure", "n", "median s", "p99 s", "max s"]
    return title + "\n" + common.table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.notice", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output-dir", type=Path, default=common.RESULTS_DIR)
    args = parser.parse_args(argv)
    from bench import run as harness

    path, envelope = harness.run_one("notice", run, quick=args.quick, output_dir=args.output_dir)
    print(render(envelope["result"]))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
