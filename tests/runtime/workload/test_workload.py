"""The workload on a v4-32 slice of the emulator (4 workers, real SSH): launch, watch, relaunch.

Each tick is the daemon's (workload_harness.py): list, read the store, probe every
worker, plan with the node and workload planners, carry the actions out. The workers are the
emulator's SSH hosts, so what the tests check on their side (files in their homes, pids,
/proc) is what happened on the "VMs".
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from page_support import page_texts
from structlog.testing import capture_logs
from workload_harness import (
    FLEET,
    PROJECT,
    ZONE,
    Harness,
    Make,
    alive,
    all_cmdlines,
    eventually,
    kinds,
    secret_free,
    ssh_emulator,
    workload,
)

from tpucared.core.model.records import AttemptOutcome, NodePhase
from tpucared.core.vocab.actions import DeleteNode, Notice
from tpucared.core.workload.actions import CHARGED_OUTCOMES, FinishAttempt, LaunchWorkload
from tpucared.core.workload.inputs import WorkerState
from tpucared.store.write_workloads import FAILURE_OUTCOMES

pytestmark = pytest.mark.timeout(60)

# Appends what the contract promises to files in the worker's home, then waits for the test
# to write its exit code (per attempt) into exit-<attempt>.
RUN = (
    'echo "$TPUCARED_ATTEMPT" >> "$HOME/attempts"\n'
    'echo "$TPUCARED_FAILURES $TPUCARED_PREEMPTIONS" >> "$HOME/counters"\n'
    'echo "$TPUCARED_FLEET $TPUCARED_SLOT $TPUCARED_NODE $TPUCARED_WORKER/$TPUCARED_NUM_WORKERS '
    '$TPUCARED_RUN_ID $GREETING" > "$HOME/env"\n'
    'while [ ! -e "$HOME/exit-$TPUCARED_ATTEMPT" ]; do sleep 0.05; done\n'
    'exit "$(cat "$HOME/exit-$TPUCARED_ATTEMPT")"\n'
)
SETUP = 'echo "setup in $PWD" >> "$HOME/setups"'


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**emulator_options, **ssh_emulator(tmp_path)}


async def started(h: Harness, attempt: int = 1) -> Any:
    """Tick until the slot's node is adopted and `attempt` runs on every worker."""
    await h.tick_until(lambda p: bool(p.of(LaunchWorkload)), f"launch attempt {attempt}")
    run_id = (await h.slot()).run_id
    await eventually(
        lambda: all(h.read(i, "attempts").split()[-1:] == [str(attempt)] for i in range(4)),
        f"attempt {attempt} runs on every worker",
    )
    return run_id


async def test_a_slice_is_launched_relaunched_on_every_worker_and_finishes(make: Make) -> None:
    h = await make(workload(RUN, setup=SETUP, env={"GREETING": "hello"}))
    await h.create_node()
    assert "adopt" in kinds(await h.tick())
    run_id = await started(h)
    snapshot = await h.store.load_snapshot()
    (probe,) = (await h.runner.probe(snapshot)).values()
    assert [w.state for w in probe.workers] == [WorkerState.RUNNING] * 4
    assert kinds(await h.tick()) == []  # running everywhere: keep watching
    pins = [w.host_keys for w in snapshot.workers_of(probe.incarnation_id)]
    assert all(len(keys) == 1 for keys in pins)  # pinned from the guest attributes

    # Worker 2's run disappears (killed with its whole process group).
    pids = {i: h.pid(i, run_id, 1) for i in range(4)}
    os.killpg(pids[2], signal.SIGKILL)
    await eventually(lambda: not alive(pids[2]), "worker 2's run died")
    plan = await h.tick()
    # The attempt failed on every worker: recorded, then stopped everywhere; the relaunch
    # waits out the crash backoff.
    assert kinds(plan) == ["finish", "stop"]
    (finish,) = plan.of(FinishAttempt)
    assert finish.outcome is AttemptOutcome.FAILED
    assert finish.detail == "worker 2 gone (died); workers 0, 1, 3 running"
    await eventually(lambda: not any(alive(pids[i]) for i in (0, 1, 3)), "the others stopped")

    plan = await h.tick()
    (launch,) = plan.of(LaunchWorkload)
    assert (launch.attempt, launch.clean_after) == (2, 1)
    await eventually(lambda: all(h.read(i, "attempts") == "1\n2\n" for i in range(4)),
                     "attempt 2 runs on every worker")  # fmt: skip
    for i in range(4):
        assert h.read(i, "counters") == "0 0\n1 0\n"  # TPUCARED_FAILURES counted the crash
        assert h.read(i, "env") == f"{FLEET} 0 {FLEET}-0 {i}/4 {run_id} hello\n"
        # Setup ran once on this node, in the workdir, before attempt 1 only.
        assert h.read(i, "setups") == f"setup in {h.home(i)}\n"
    slot = await h.slot()
    assert (slot.attempts, slot.failures, slot.preemptions) == (2, 1, 0)

    # Exit 0 everywhere: the attempt succeeded and the slot is done (restart = on-failure).
    for i in range(4):
        (h.home(i) / "exit-2").write_text("0\n")
    plan = await h.tick_until(lambda p: bool(p.of(FinishAttempt)), "attempt 2 finishes")
    assert kinds(plan) == ["finish", "slot-done"]
    assert [(a.number, a.outcome) for a in await h.attempts()] == [
        (1, AttemptOutcome.FAILED),
        (2, AttemptOutcome.SUCCEEDED),
    ]
    assert (await h.slot()).done
    # The node planner deletes the node of a done slot (on_success = delete).
    plan = await h.tick()
    (delete,) = plan.of(DeleteNode)
    assert delete.end_reason == "workload finished (on_success = delete)"


async def test_a_non_zero_exit_past_the_crash_budget_gives_up(make: Make) -> None:
    h = await make(workload(RUN, max_failures=0), guest_keys=False)
    await h.create_node()
    run_id = await started(h)
    (h.home(1) / "exit-1").write_text("3\n")
    plan = await h.tick_until(lambda p: bool(p.of(FinishAttempt)), "attempt 1 finishes")
    assert kinds(plan) == ["finish", "stop", "slot-done", "notice"]
    (finish,) = plan.of(FinishAttempt)
    assert finish.exit_codes == {0: None, 1: 3, 2: None, 3: None}
    (notice,) = plan.of(Notice)
    assert "1 failures, more than max_failures = 0" in notice.reason
    others = [h.pid(i, run_id, 1) for i in (0, 2, 3)]
    await eventually(lambda: not any(alive(p) for p in others), "the others stopped")
    slot = await h.slot()
    assert (slot.done, slot.failures, slot.attempts) == (True, 1, 1)
    # Trust on first use: the keys seen were pinned for this incarnation.
    snapshot = await h.store.load_snapshot()
    (node,) = snapshot.nodes.values()
    assert all(w.host_keys for w in snapshot.workers_of(node.id))


async def test_a_preempted_slice_ends_its_attempt_as_preempted(make: Make) -> None:
    h = await make(workload(RUN))
    await h.create_node()
    run_id = await started(h)
    pids = [h.pid(i, run_id, 1) for i in range(4)]
    await h.control(0, "preempt")
    await eventually(lambda: not any(alive(p) for p in pids), "the preemption killed the runs")
    plan = await h.tick_until(lambda p: bool(p.of(FinishAttempt)), "the attempt finishes")
    assert kinds(plan) == ["transition", "delete", "finish"]
    (finish,) = plan.of(FinishAttempt)
    assert finish.outcome is AttemptOutcome.PREEMPTED
    slot = await h.slot()
    # The node planner counted the preemption; the crash budget is untouched.
    assert (slot.preemptions, slot.failures) == (1, 0)


async def test_a_restarted_daemon_reattaches_to_the_running_attempt(make: Make) -> None:
    h = await make(workload(RUN), guest_keys=False)
    await h.create_node()
    run_id = await started(h)
    pids = [h.pid(i, run_id, 1) for i in range(4)]
    await h.runner.close()
    # A new runner: no memory, a new connection pool; the pins come from the database.
    h.runner = h.new_runner()
    for _ in range(3):
        assert kinds(await h.tick()) == []
    assert [h.pid(i, run_id, 1) for i in range(4)] == pids
    assert all(alive(p) for p in pids)
    assert all(h.read(i, "attempts") == "1\n" for i in range(4))


async def test_a_hung_slice_is_stopped_and_relaunched(make: Make) -> None:
    h = await make(workload('echo "attempt $TPUCARED_ATTEMPT" >> "$HOME/attempts"; sleep 300',
                            hang_timeout=0.5), guest_keys=False)  # fmt: skip
    await h.create_node()
    run_id = await started(h)
    pids = [h.pid(i, run_id, 1) for i in range(4)]
    plan = await h.tick_until(lambda p: bool(p.of(FinishAttempt)), "the hang is noticed")
    (finish,) = plan.of(FinishAttempt)
    assert finish.outcome is AttemptOutcome.HUNG
    assert "no log output on any worker" in (finish.detail or "")
    await eventually(lambda: not any(alive(p) for p in pids), "the hung runs were stopped")
    assert (await h.slot()).failures == 1


async def test_a_secret_reaches_the_workload_and_nothing_else(
    make: Make, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "s3cr3t-" + secrets.token_hex(16)
    spec = workload(
        'printf %s "$API_TOKEN" | sha256sum | cut -c1-64 > "$HOME/token.sha"; sleep 300',
        secrets={"API_TOKEN": "TEST_API_TOKEN"},
    )
    # Our events as logged, before any redaction, and every stdlib logger (asyncssh...).
    # Not configure_logging(): it would cache the loggers of every later test in this process.
    with capture_logs() as events, caplog.at_level(logging.DEBUG):
        h = await make(spec, environ={"TEST_API_TOKEN": secret})
        await h.create_node()
        await h.tick_until(lambda p: bool(p.of(LaunchWorkload)), "launch")
        expected = hashlib.sha256(secret.encode()).hexdigest() + "\n"
        await eventually(lambda: all(h.read(i, "token.sha") == expected for i in range(4)),
                         "every worker's run got the secret")  # fmt: skip
        assert kinds(await h.tick()) == []
    assert any(e["event"] == "workload.launched" for e in events)  # the logs were captured
    assert secret_free(repr(events), secret)
    assert secret_free("\n".join(r.getMessage() for r in caplog.records), secret)
    # While it runs: in no process's command line...
    assert all(secret_free(c, secret) for c in all_cmdlines())
    run_id = (await h.slot()).run_id
    for i in range(4):
        slot_dir = h.home(i) / ".tpucared" / "runs" / run_id
        # ...only in the 0600 secrets file the run sources, not in its script or log.
        assert (slot_dir / "secrets.env").stat().st_mode & 0o777 == 0o600
        assert not secret_free((slot_dir / "secrets.env").read_bytes(), secret)
        for name in ("run.sh", "log"):
            assert secret_free((slot_dir / "attempt-1" / name).read_bytes(), secret)
    # Not in the node's metadata, nor anywhere the API shows it.
    node = await h.client.get_node(PROJECT, ZONE, f"{FLEET}-0")
    assert secret_free(json.dumps(node), secret)
    # Not on the page, nor in its JSON (tpucared/runtime/page/).
    assert secret_free(await page_texts(h.store, FLEET, 1), secret)
    # Not in the database (its file, and the write-ahead log).
    await h.store.close()
    found = files_of(tmp_path, "state.db*")
    assert "state.db" in found
    for name, data in found.items():
        assert secret_free(data, secret), name


def files_of(directory: Path, pattern: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.glob(pattern)}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                   check=True, capture_output=True)  # fmt: skip


async def test_the_repository_is_checked_out_at_its_ref_and_the_run_starts_there(
    make: Make, tmp_path: Path
) -> None:
    repo = tmp_path / "trainer"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "train.sh").write_text('echo "v1 in $PWD" > "$HOME/ran"\n')
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v1")
    git(repo, "tag", "v1")
    (repo / "train.sh").write_text('echo "v2" > "$HOME/ran"\n')
    git(repo, "commit", "-q", "-am", "v2")
    h = await make(workload("sh train.sh", repository=str(repo), ref="v1", setup="ls > ../ls"),
                   guest_keys=False)  # fmt: skip
    await h.create_node()
    plan = await h.tick_until(lambda p: bool(p.of(FinishAttempt)), "the run finishes")
    (finish,) = plan.of(FinishAttempt)
    assert finish.outcome is AttemptOutcome.SUCCEEDED, finish.detail
    for i in range(4):
        assert h.read(i, "ran") == f"v1 in {h.home(i) / 'trainer'}\n"
        assert h.read(i, "ls") == "train.sh\n"


async def test_the_store_and_the_planner_charge_the_same_outcomes() -> None:
    assert CHARGED_OUTCOMES == FAILURE_OUTCOMES


async def test_the_incarnation_must_be_ready_for_a_launch(make: Make) -> None:
    """A launch planned on a node that is no longer READY when it runs does nothing."""
    h = await make(workload(RUN), guest_keys=False)
    await h.create_node()
    await h.tick()  # adopted
    snapshot = await h.store.load_snapshot()
    (inc,) = snapshot.nodes.values()
    async with h.store.write() as tx:
        await tx.transition(inc.id, NodePhase.READY, NodePhase.DEAD, inc.phase_since)
    launch = LaunchWorkload(fleet=FLEET, slot=0, incarnation_id=inc.id, node_name=inc.node_name,
                            attempt=1, reason="test")  # fmt: skip
    await h.runner.execute(launch)
    assert await h.attempts() == []
