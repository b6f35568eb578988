"""A multislice slot end to end with the real daemon process (issue 13): 2 slices x 2 workers
(v4-16), each worker one of the emulator's SSH hosts, provisioned directly (two nodes) or as
one queued resource with multisliceParams.

Attempt 1 must run on all 4 workers with the multislice environment; one slice is preempted;
attempt 1 is stopped on the surviving slice, the lost slice (direct) or the whole queued
resource (queued) is replaced, and attempt 2 runs on all 4 again; the slot counts one
preemption. The workload records, per worker, its attempt and environment in a directory
outside the workers' homes (a preempted VM loses its disk), and its shell's pid.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
from runtime_support import PROJECT, SLOW, ZONE, Rig, hosts_emulator_options, query, wait_for

from tpucared.config import load_config
from tpucared.runtime.workload.by_hand import exec_command, logs
from tpucared.store import Store

pytestmark = pytest.mark.timeout(240)

FLEET = "ms"
SLICES, WORKERS = 2, 2  # v4-16: 2 hosts per slice
VARS = [
    "TPUCARED_ATTEMPT",
    "TPUCARED_SLICE",
    "TPUCARED_NUM_SLICES",
    "TPUCARED_WORKER",
    "TPUCARED_NUM_WORKERS",
    "MEGASCALE_SLICE_ID",
    "MEGASCALE_NUM_SLICES",
    "MEGASCALE_COORDINATOR_ADDRESS",
    "MEGASCALE_PORT",
]
RUN = (
    "w=$TPUCARED_SLICE-$TPUCARED_WORKER; "
    + "echo " + " ".join(f'"${v}"' for v in VARS) + ' >> "$RESULTS/env-$w"; '
    'echo $$ > "$RESULTS/pid-$w-$TPUCARED_ATTEMPT"; '
    "while true; do sleep 0.1; done"
)  # fmt: skip


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(emulator_options, tmp_path, queued_provision_seconds=0.2)


def _runs(results: Path) -> dict[str, list[dict[str, str]]]:
    """Per `slice-worker`: each run's environment, in launch order."""
    out: dict[str, list[dict[str, str]]] = {}
    for s in range(SLICES):
        for w in range(WORKERS):
            f = results / f"env-{s}-{w}"
            lines = f.read_text().splitlines() if f.exists() else []
            out[f"{s}-{w}"] = [dict(zip(VARS, line.split(), strict=True)) for line in lines]
    return out


def _attempts(results: Path) -> list[list[int]]:
    return [[int(r["TPUCARED_ATTEMPT"]) for r in runs] for runs in _runs(results).values()]


async def _by_hand(config: Path, db: Path) -> None:
    """`exec` and `logs` on FLEET/SLOT reach every slice, workers numbered slice by slice."""
    cfg = load_config(config)
    async with Store.open(db, read_only=True) as store:
        snap = await store.load_snapshot()
    out, err = io.StringIO(), io.StringIO()
    assert await exec_command(cfg, snap, f"{FLEET}/0", "echo up", out=out, err=err) == 0
    workers = SLICES * WORKERS
    assert sorted(out.getvalue().splitlines()) == [f"{FLEET}/0/{w}: up" for w in range(workers)]
    raw = io.BytesIO()
    last = workers - 1  # slice 1's last worker
    assert await logs(cfg, snap, f"{FLEET}/0", worker=last, out=raw, err=err) == 0, err.getvalue()
    assert b"start pid=" in raw.getvalue()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("provisioning", ["direct", "queued"])
async def test_a_multislice_slot_runs_on_every_worker_of_every_slice_through_a_preemption(
    rig: Rig, provisioning: str
) -> None:
    control, results, db = rig.control, rig.results, rig.db
    config = rig.config(
        fleet=FLEET, accelerator_type="v4-16", run=RUN,
        fleet_lines=f'slices = {SLICES}\nprovisioning = "{provisioning}"',
        tables='[policy]\ncreate_grace = "10s"\nvanish_grace = "2s"',
    )  # fmt: skip
    await rig.daemons(config).start()

    async def everywhere(attempts: list[int]) -> bool:
        return _attempts(results) == [attempts] * (SLICES * WORKERS)

    await wait_for(lambda: everywhere([1]), SLOW, "attempt 1 on every worker of every slice")
    workers = query(
        db,
        "SELECT n.slice, w.worker, w.internal_ip, n.node_name FROM workers w "
        "JOIN nodes n ON n.id = w.node_id WHERE n.phase = 'ready' ORDER BY n.slice, w.worker",
    )
    assert [(r["slice"], r["worker"]) for r in workers] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [r["node_name"] for r in workers][::WORKERS] == [f"{FLEET}-0-0", f"{FLEET}-0-1"]
    coordinator = workers[0]["internal_ip"]  # slice 0, worker 0
    for key, runs in _runs(results).items():
        piece, worker = key.split("-")
        assert runs[0] == {
            "TPUCARED_ATTEMPT": "1",
            "TPUCARED_SLICE": piece,
            "TPUCARED_NUM_SLICES": str(SLICES),
            "TPUCARED_WORKER": worker,
            "TPUCARED_NUM_WORKERS": str(WORKERS),
            "MEGASCALE_SLICE_ID": piece,
            "MEGASCALE_NUM_SLICES": str(SLICES),
            "MEGASCALE_COORDINATOR_ADDRESS": coordinator,
            "MEGASCALE_PORT": "8081",
        }
    ids = {r["node_name"]: r["id"] for r in query(db, "SELECT id, node_name FROM nodes")}

    # Slice 1 is preempted: attempt 1 stops on slice 0 too, attempt 2 runs everywhere.
    await control.node_action(f"{FLEET}-0-1", "preempt")
    await wait_for(lambda: everywhere([1, 2]), SLOW, "attempt 2 on every worker after it")
    first_pids = [int((results / f"pid-0-{w}-1").read_text()) for w in range(WORKERS)]
    if provisioning == "direct":
        # The kept slice: the daemon stopped attempt 1 there before launching attempt 2.
        assert not any(_alive(p) for p in first_pids), "attempt 1 still runs on slice 0"
        await _by_hand(config, db)
    else:
        # Deleted with the queued resource: its VMs (the emulator's processes) go with it.
        async def gone() -> bool:
            return not any(_alive(p) for p in first_pids)

        await wait_for(gone, 10, "attempt 1's processes on the old slice 0 gone")
    slot = query(db, "SELECT preemptions, attempts FROM slots WHERE fleet = ?", FLEET)[0]
    assert (slot["preemptions"], slot["attempts"]) == (1, 2)
    outcomes = query(db, "SELECT number, outcome FROM workload_attempts ORDER BY number")
    assert [(r["number"], r["outcome"]) for r in outcomes] == [(1, "preempted"), (2, None)]
    live = {
        r["node_name"]: r["id"]
        for r in query(db, "SELECT id, node_name FROM nodes WHERE phase = 'ready'")
    }
    replaced = sorted(n for n in live if live[n] != ids.get(n))
    # Direct: only the lost slice is new. Queued: the whole queued resource is.
    expected = [f"{FLEET}-0-1"] if provisioning == "direct" else [f"{FLEET}-0-0", f"{FLEET}-0-1"]
    assert replaced == expected
    if provisioning == "queued":
        log = await control.requests()
        deleted = [r for r in log if r["method"] == "DELETE" and r["path"].startswith("/v2/")]
        # One teardown of the whole queued resource, forced; never a node by itself.
        assert deleted
        assert all(r["path"].endswith("/queuedResources/ms-0") for r in deleted)
        assert all("force" in str(r.get("query")) for r in deleted)
        # One delete of the shared queued resource at a time, none after its successor's
        # create (CloudCalls.name_busy: a conflicting retry once deleted the new one).
        posts = [r for r in log if r["method"] == "POST" and "/queuedResources" in r["path"]]
        assert len(posts) == 2
        late = [r for r in deleted if r["status"] == 409 or r["time"] >= posts[1]["time"]]
        assert late == [], (deleted, posts)


# "Trains" until the stop signal, records when it got it, "checkpoints" (0.5 s), exits 0.
NOTICED_RUN = (
    "w=$TPUCARED_SLICE-$TPUCARED_WORKER; "
    'echo "$TPUCARED_ATTEMPT" >> "$RESULTS/attempts-$w"; '
    "trap 'date +%s.%N > \"$RESULTS/term-$w-$TPUCARED_ATTEMPT\"; sleep 0.5; exit 0' TERM; "
    "while :; do sleep 0.1; done"
)


async def test_a_notice_on_one_slice_stops_the_whole_job_as_one(rig: Rig) -> None:
    # The notice reaches only slice 1's VMs; the daemon sends slice 0's workers the same
    # signal, so every process checkpoints; the attempt is preempted (not failed), slice 1
    # alone is replaced before the API says PREEMPTED, and attempt 2 runs everywhere.
    control, results, db = rig.control, rig.results, rig.db
    await rig.start(
        fleet=FLEET, accelerator_type="v4-16", run=NOTICED_RUN, poll="2s",
        workload='stop_grace = "10s"', fleet_lines=f"slices = {SLICES}",
    )  # fmt: skip
    keys = [f"{s}-{w}" for s in range(SLICES) for w in range(WORKERS)]

    def attempts(key: str) -> list[int]:
        f = results / f"attempts-{key}"
        return [int(x) for x in f.read_text().split()] if f.exists() else []

    async def everywhere(expected: list[int]) -> bool:
        return all(attempts(k) == expected for k in keys)

    await wait_for(lambda: everywhere([1]), SLOW, "attempt 1 on every worker of every slice")
    before = {r["node_name"]: r["cloud_id"] for r in query(db, "SELECT * FROM nodes")}
    await control._call(
        "POST",
        f"/projects/{PROJECT}/locations/{ZONE}/nodes/{FLEET}-0-1:preempt",
        {"notice_seconds": 20},
    )

    async def all_signalled() -> bool:
        return all((results / f"term-{k}-1").exists() for k in keys)

    await wait_for(all_signalled, 10, "the stop signal on every worker of both slices")
    await wait_for(lambda: everywhere([1, 2]), SLOW, "attempt 2 on every worker after it")
    first = query(db, "SELECT outcome, detail FROM workload_attempts WHERE number = 1")[0]
    assert first["outcome"] == "preempted", first["detail"]
    slot = query(db, "SELECT preemptions, failures FROM slots WHERE fleet = ?", FLEET)[0]
    assert (slot["preemptions"], slot["failures"]) == (1, 0)
    after = {
        r["node_name"]: r["cloud_id"]
        for r in query(db, "SELECT * FROM nodes WHERE phase = 'ready'")
    }
    assert after[f"{FLEET}-0-0"] == before[f"{FLEET}-0-0"]  # the healthy slice is kept
    assert after[f"{FLEET}-0-1"] != before[f"{FLEET}-0-1"]
    (event,) = query(db, "SELECT message FROM events WHERE kind = 'preemption.notice'")
    assert f"{FLEET}-0-1" in event["message"]
    assert "2 run(s) on the job's other slices" in event["message"]
