"""The workload runtime's pure helpers: worker-side layout, guest attributes, plan splitting."""

from __future__ import annotations

import resource
from datetime import UTC, datetime
from pathlib import Path

import asyncssh
import pytest

from tpucared.config import Config, DaemonConfig, GcpConfig, SshConfig
from tpucared.core.model.records import AttemptOutcome, NodePhase
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.vocab.actions import DeleteNode, Notice, Severity
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.policy import Policy
from tpucared.core.workload.actions import FinishAttempt, MarkSlotDone
from tpucared.core.workload.inputs import WorkloadSnapshot
from tpucared.gcp.tpu.cloud import guest_attribute_pairs
from tpucared.launch import layout, pool_size
from tpucared.runtime.workload.launchers import pins_from
from tpucared.runtime.workload.runner import WorkloadRunner
from tpucared.store import Store
from tpucared.store.migrate import upgrade_to_head

NOW = datetime(2025, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("repository", "workdir"),
    [
        (None, "~"),
        ("https://github.com/org/trainer", "~/trainer"),
        ("https://github.com/org/trainer.git/", "~/trainer"),
        ("git@github.com:org/my_repo.git", "~/my_repo"),
        ("/srv/git/x y", "~/x-y"),
        ("https://example.com/.git", "~/repo"),
    ],
)
def test_the_workdir_is_named_as_git_clone_names_it(repository: str | None, workdir: str) -> None:
    assert layout.workdir(WorkloadSpec(run="x", repository=repository)) == workdir


def test_paths_of_a_slot() -> None:
    assert layout.attempt_dir("sweep-0-ab", 3) == "~/.tpucared/runs/sweep-0-ab/attempt-3"
    # An idle slot is probed at a run directory that never exists.
    assert layout.attempt_dir("sweep-0-ab", None) == "~/.tpucared/runs/sweep-0-ab/attempt-0"
    assert layout.secrets_path("sweep-0-ab") == "~/.tpucared/runs/sweep-0-ab/secrets.env"


def test_setup_runs_again_only_when_the_setup_changes() -> None:
    a = WorkloadSpec(run="x", repository="https://h/r", ref="main", setup="make")
    assert layout.setup_marker(a) == layout.setup_marker(WorkloadSpec(run="y", **_setup_of(a)))
    assert layout.setup_marker(a) != layout.setup_marker(WorkloadSpec(run="x", setup="make"))
    assert layout.setup_marker(a) != layout.setup_marker(
        WorkloadSpec(run="x", repository="https://h/r", ref="v2", setup="make")
    )


def _setup_of(spec: WorkloadSpec) -> dict[str, str | None]:
    return {"repository": spec.repository, "ref": spec.ref, "setup": spec.setup}


def test_a_workload_without_setup_just_runs_in_its_workdir() -> None:
    assert layout.workload_command(WorkloadSpec(run="python3 train.py")) == (
        'cd "$HOME" || exit 1\npython3 train.py\n'
    )
    with_setup = layout.workload_command(WorkloadSpec(run="python3 train.py", setup="make"))
    assert with_setup.startswith("marker=")
    assert with_setup.endswith('cd "$HOME" || exit 1\npython3 train.py\n')


def test_guest_attributes_give_each_workers_pins() -> None:
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode()
    algorithm, blob = key.split()[:2]
    body = {
        "guestAttributes": [
            {"queryPath": "hostkeys/", "queryValue": {"items": [
                {"namespace": "hostkeys", "key": algorithm, "value": blob}]}},
            {"queryPath": "hostkeys/", "queryValue": {}},  # not published yet
            {"queryPath": "hostkeys/", "queryValue": {"items": [
                {"namespace": "hostkeys", "key": algorithm, "value": f"{algorithm} {blob} c"}]}},
        ]
    }  # fmt: skip
    assert pins_from(guest_attribute_pairs(body)) == {
        0: (f"{algorithm} {blob}",),
        2: (f"{algorithm} {blob}",),
    }
    assert pins_from(guest_attribute_pairs({})) == {}


def test_split_hands_node_actions_to_the_executor_and_the_rest_to_the_runner() -> None:
    delete = DeleteNode(
        incarnation_id=1,
        fleet="f",
        slot=0,
        node_name="f-0",
        zone="z",
        expected=NodePhase.READY,
        queued_resource=None,
        reason="replace",
    )
    finish = FinishAttempt(fleet="f", slot=0, attempt_id=1, attempt=1,
                           outcome=AttemptOutcome.FAILED, reason="r")  # fmt: skip
    done = MarkSlotDone(fleet="f", slot=0, reason="r")
    notice = Notice(key="k", severity=Severity.ERROR, reason="r")
    plan = Plan(now=NOW, actions=(delete, finish, done, notice), standing=frozenset({"k"}))
    node_plan, mine = WorkloadRunner.split(plan)
    assert node_plan.actions == (delete, notice)
    assert node_plan.standing == plan.standing
    assert mine == (finish, done)


async def test_a_runner_from_the_config_probes_nothing_without_slices(tmp_path: Path) -> None:
    await upgrade_to_head(tmp_path / "state.db")
    config = Config(
        path=tmp_path / "fleet.toml",
        daemon=DaemonConfig(
            db=str(tmp_path / "state.db"),
            poll_interval=1.0,
            http_host="127.0.0.1",
            http_port=0,
            owner="o",
        ),
        gcp=GcpConfig(project="p", endpoint="http://127.0.0.1:1", credentials="none"),
        ssh=SshConfig(
            user="u",
            port=22,
            key=tmp_path / "keys" / "id_ed25519",
            internal_ip=False,
            concurrency=4,
        ),
        fleets=(),
        policy=Policy(),
    )
    async with Store.open(config.daemon.db) as store:
        async with WorkloadRunner.from_config(config, store, clock=lambda: NOW) as runner:
            assert await runner.probe(WorkloadSnapshot()) == {}
        assert (tmp_path / "keys" / "id_ed25519").exists()  # the daemon's key, made once


@pytest.mark.parametrize(
    ("limit", "pooled"),
    [
        (1024, 512),  # systemd's default soft limit when it cannot be raised: half
        (524288, 523264),  # systemd's hard limit, raised to at start: all but a reserve
        (100, 64),  # never below a floor
        (resource.RLIM_INFINITY, (1 << 20) - 1024),
    ],
)
def test_the_pool_keeps_a_connection_per_worker_as_far_as_the_open_files_limit_allows(
    limit: int, pooled: int
) -> None:
    assert pool_size(limit) == pooled
