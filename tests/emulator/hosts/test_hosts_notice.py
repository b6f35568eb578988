"""Preemption notices on the emulator's worker hosts: run.sh's watcher signals the workload,
and notice_wait.sh (the daemon's per-slice watch) hears it at once without polling the disk."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from hosts_support import NODES, Cloud, eventually, group_members, read

from tpucared.launch import (
    NoticeState,
    RunState,
    launch_script,
    notice_wait_script,
    parse_notice_wait,
    parse_probe,
    probe_script,
)
from tpucared.ssh import sh_command

# A workload that records the signal it gets and its notice file, then checkpoints for a
# moment and exits 0, as a training script that saves on SIGTERM would.
CHECKPOINTS = (
    'echo "$TPUCARED_PREEMPTION_NOTICE_FILE" > "{out}/file-$TPUCARED_EMULATOR_WORKER"; '
    "trap 'echo TERM > \"{out}/term-$TPUCARED_EMULATOR_WORKER\"; sleep 0.3; exit 0' TERM; "
    "while :; do sleep 0.05; done"
)


async def test_a_notice_signals_every_worker_while_the_node_stays_ready(
    cloud: Cloud, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    await cloud.create("noticed", "v4-16", schedulingConfig={"spot": True})
    targets = await cloud.targets("noticed")
    groups = await cloud.launch(targets, "~/run", CHECKPOINTS.format(out=out))
    await eventually(lambda: len(list(out.glob("file-*"))) == 2, "the workload started")

    node = await cloud.control("noticed", "preempt", {"notice_seconds": 2})
    assert (node["state"], node["notice_at"] is not None) == ("READY", True)
    await eventually(lambda: len(list(out.glob("term-*"))) == 2, "SIGTERM on every worker", 1.5)
    assert (await cloud.http.ok("GET", f"{NODES}/noticed"))["state"] == "READY"

    probes = await cloud.exited(targets)  # the workload checkpoints for 0.3 s, then exits 0
    assert [(p.state, p.exit_code) for p in probes] == [(RunState.EXITED, 0)] * 2
    assert all(p.notice_at is not None for p in probes)
    assert [p.notice_kind for p in probes] == ["preempted"] * len(probes)
    notice_files = {(out / f"file-{w}").read_text().strip() for w in range(2)}
    assert all(f.endswith("/run/notice") for f in notice_files)
    # Beside it, what kind of notice it was (a host-maintenance one says `maintenance`).
    assert {read(f + "_kind") for f in notice_files} == {b"preempted\n"}
    # The watcher went with the workload: nothing of the run is left on the workers.
    await eventually(lambda: not any(group_members(g) for g in groups), "the runs' groups ended")
    await cloud.wait_state("noticed", "PREEMPTED")


async def test_without_a_notice_the_watcher_leaves_nothing_behind(cloud: Cloud) -> None:
    await cloud.create("quiet", "v4-8")
    targets = await cloud.targets("quiet")
    (group,) = await cloud.launch(targets, "~/run", "sleep 0.3")
    await eventually(lambda: not group_members(group), "the run and its watcher ended", 5)
    (result,) = await cloud.run(targets, sh_command(probe_script("~/run")))
    probe = parse_probe(result.stdout_tail)
    assert (probe.state, probe.exit_code, probe.notice_at) == (RunState.EXITED, 0, None)


async def test_an_instant_preemption_has_no_notice(cloud: Cloud) -> None:
    await cloud.create("instant", "v4-8")
    node = await cloud.control("instant", "preempt")
    assert (node["state"], node["notice_at"]) == ("PREEMPTED", None)
    with pytest.raises(AssertionError, match="notice_seconds"):
        await cloud.control("instant", "preempt", {"notice_seconds": -1})


def polling_sleeps() -> int:
    """`sleep 0.2` processes (the disk-polling wait's) under this test's process: the emulated
    workers' shells are its descendants; another suite's on the same machine are not."""
    parents: dict[int, int] = {}
    sleeps = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                # The parent is the 2nd field after the command's parenthesised name.
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            if argv[:2] == [b"sleep", b"0.2"]:
                sleeps.append(int(entry.name))
    ours = os.getpid()

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == ours:
                return True
        return False

    return sum(descends(pid) for pid in sleeps)


async def test_the_notice_wait_holds_the_metadata_request_and_answers_at_once(
    cloud: Cloud,
) -> None:
    """The daemon's per-slice watch blocks on `instance/preempted` instead of polling the run
    directory five times a second: no `sleep` while it waits, and the notice is heard within
    a fraction of a second of run.sh's watcher writing it."""
    await cloud.create("watched", "v4-8", schedulingConfig={"spot": True})
    targets = await cloud.targets("watched")
    launched = await cloud.run(targets, sh_command(launch_script("~/run", "sleep 300", env={})))
    assert launched[0].ok
    wait = asyncio.create_task(
        cloud.run(targets, sh_command(notice_wait_script("~/run", "notice", 60)))
    )
    await asyncio.sleep(1.5)  # the wait is held by now
    assert not wait.done()
    assert polling_sleeps() == 0  # nothing polls meanwhile
    noticed = time.monotonic()
    await cloud.control("watched", "preempt", {"notice_seconds": 5})
    (result,) = await wait
    heard = time.monotonic() - noticed
    answer = parse_notice_wait(result.stdout_tail)
    assert answer.state is NoticeState.NOTICED
    assert answer.at is not None
    assert "kind=preempted" in result.stdout_tail
    assert heard < 1.5, heard


async def test_a_notice_wait_without_a_notice_times_out_and_sees_the_run_end(
    cloud: Cloud,
) -> None:
    await cloud.create("calm", "v4-8")
    targets = await cloud.targets("calm")
    await cloud.run(targets, sh_command(launch_script("~/run", "sleep 300", env={})))
    started = time.monotonic()
    (result,) = await cloud.run(targets, sh_command(notice_wait_script("~/run", "notice", 2)))
    assert parse_notice_wait(result.stdout_tail).state is NoticeState.TIMEOUT
    assert 1.5 <= time.monotonic() - started < 5
    await cloud.run(targets, sh_command(launch_script("~/done", "true", env={})))
    for _ in range(50):
        (result,) = await cloud.run(targets, sh_command(notice_wait_script("~/done", "notice", 2)))
        if parse_notice_wait(result.stdout_tail).state is NoticeState.ENDED:
            break
        await asyncio.sleep(0.1)
    assert parse_notice_wait(result.stdout_tail).state is NoticeState.ENDED
