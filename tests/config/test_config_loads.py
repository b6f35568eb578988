"""The config file: the examples load, each section's values and defaults, and where the
file is found."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from config_support import MINIMAL, daemon, load

from tpucared.config import ENV_VAR, ConfigError, load_config, resolve_config_path
from tpucared.core.model.specs import CapacityKind, OnSuccess, Provisioning, RestartPolicy
from tpucared.core.vocab.policy import Policy

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


@pytest.mark.parametrize("name", ["emulator.toml", "gce.toml", "standby/standby.toml"])
def test_examples_load(name: str) -> None:
    config = load_config(EXAMPLES / name)
    assert config.fleets
    assert config.path == EXAMPLES / name


def test_emulator_example() -> None:
    config = load_config(EXAMPLES / "emulator.toml")
    assert config.gcp.endpoint == "http://127.0.0.1:8471"
    assert config.gcp.credentials == "none"
    demo, sweep, iron = config.fleets
    assert (demo.accelerator_type, demo.size, demo.capacity) == ("v4-32", 1, CapacityKind.SPOT)
    assert demo.workload is not None
    assert demo.workload.max_failures == 5
    assert (sweep.accelerator_type, sweep.size) == ("v4-8", 3)
    assert sweep.zones == ("us-central2-b", "us-central1-a")
    assert (iron.api, iron.accelerator_type, iron.size) == ("compute", "tpu7x-standard-4t", 1)


def test_gce_example() -> None:
    config = load_config(EXAMPLES / "gce.toml")
    assert config.gcp.endpoint == "https://tpu.googleapis.com"
    assert config.daemon.owner == "trc-main"
    sweep = config.fleet("sweep")
    assert sweep.workload is not None
    assert sweep.workload.secrets == {"WANDB_API_KEY": "WANDB_API_KEY"}
    assert sweep.workload.hang_timeout == 1800.0
    assert config.fleet("big").provisioning is Provisioning.QUEUED
    assert (config.fleet("ms").slices, config.fleet("ms").multislice_hold) == (2, 1800.0)
    iron = config.fleet("iron")
    assert (iron.api, iron.accelerator_type, iron.node.on_preemption) == (
        "compute",
        "tpu7x-standard-4t",
        "stop",
    )
    assert config.guard is not None
    assert config.guard.max_nodes == 12
    assert config.policy.timeouts["creating"] == timedelta(minutes=30)
    # "These are the defaults", the example says of its [policy]: keep it true.
    assert config.policy == Policy(timeouts=config.policy.timeouts)


def test_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, MINIMAL)
    assert config.daemon.db == str(tmp_path / "state.db")
    assert config.daemon.db_url == f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"
    assert config.daemon.poll_interval == 10.0
    assert config.daemon.lease == 15.0
    # Left out, the lease outlasts a poll and a half, whatever the poll.
    slow = load(tmp_path, daemon('poll_interval = "30s"'))
    assert slow.daemon.lease == 45.0
    assert (config.daemon.http_host, config.daemon.http_port) == ("127.0.0.1", 9464)
    assert config.daemon.owner == "default"
    assert config.gcp.endpoint == "https://tpu.googleapis.com"
    assert config.gcp.credentials == "default"
    assert config.ssh.key == tmp_path / "id_ed25519"
    assert (config.ssh.user, config.ssh.port, config.ssh.concurrency) == ("tpucared", 22, 64)
    assert config.ssh.probe_rate == 200
    assert config.policy == Policy()
    assert config.guard is None
    (fleet,) = config.fleets
    assert (fleet.capacity, fleet.provisioning, fleet.workload) == (
        CapacityKind.SPOT,
        Provisioning.DIRECT,
        None,
    )


def test_workload_and_secrets(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("x")
    config = load(
        tmp_path,
        MINIMAL
        + """
        [fleet.workload]
        run = "python3 train.py"
        env = { WANDB_PROJECT = "gpt" }
        secrets = { WANDB_API_KEY = { env = "MY_WANDB_KEY" } }
        files = { "data.txt" = "/tmp/data.txt" }
        restart = "always"
        on_success = "keep"
        hang_timeout = "1h30m"
        """,
    )
    workload = config.fleets[0].workload
    assert workload is not None
    assert workload.secrets == {"WANDB_API_KEY": "MY_WANDB_KEY"}
    assert workload.files == {str(tmp_path / "data.txt"): "/tmp/data.txt"}
    assert workload.restart is RestartPolicy.ALWAYS
    assert workload.on_success is OnSuccess.KEEP
    assert workload.hang_timeout == 5400.0
    # The preemption notice's defaults: SIGTERM, 25 s to checkpoint.
    assert (workload.stop_signal, workload.stop_grace) == ("TERM", 25.0)


def test_the_notices_stop_signal_and_grace(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        MINIMAL + '[fleet.workload]\nrun = "x"\nstop_signal = "SIGUSR1"\nstop_grace = "1m"\n',
    )
    workload = config.fleets[0].workload
    assert workload is not None
    assert (workload.stop_signal, workload.stop_grace) == ("USR1", 60.0)


def test_secret_values_are_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    config = load(
        tmp_path,
        MINIMAL + '[fleet.workload]\nrun = "x"\nsecrets = { K = { env = "NOT_SET_ANYWHERE" } }\n',
    )
    assert config.fleets[0].workload is not None
    assert config.fleets[0].workload.secrets == {"K": "NOT_SET_ANYWHERE"}


def test_policy_section(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        MINIMAL.replace(
            "[gcp]",
            """
            [policy]
            max_creates = 2
            capacity_backoff = "10s"
            capacity_backoff_cap = "1m"
            error_backoff = "20m"
            error_backoff_cap = "1h"

            [policy.timeouts]
            creating = "45m"
            queued = "never"
            provisioning = "2h"

            [gcp]""",
        ),
    )
    p = config.policy
    assert p.max_creates == 2
    assert (p.capacity_backoff.base, p.capacity_backoff.cap) == (
        timedelta(seconds=10),
        timedelta(minutes=1),
    )
    assert p.error_backoff.floor == timedelta(minutes=20)
    assert p.timeouts["creating"] == timedelta(minutes=45)
    assert p.timeouts["queued"] is None
    assert p.timeouts["deleting"] == timedelta(minutes=15)
    # Unset, the capacity jitter keeps its default share; the others stay full jitter.
    assert p.capacity_backoff.jitter == Policy().capacity_backoff.jitter == 0.1
    assert p.transient_backoff.jitter == p.error_backoff.jitter == 1.0


def test_default_capacity_backoff_is_a_near_constant_short_wait(tmp_path: Path) -> None:
    rule = load(tmp_path, MINIMAL).policy.capacity_backoff
    assert (rule.base, rule.cap, rule.floor) == (
        timedelta(seconds=4),
        timedelta(seconds=4),
        timedelta(0),
    )
    assert rule.jitter == 0.1  # every wait in [3.6 s, 4 s]


@pytest.mark.parametrize(
    ("value", "share"), [("0.0", 0.0), ("0.25", 0.25), ("1.0", 1.0), ("1", 1.0), ("0", 0.0)]
)
def test_capacity_backoff_jitter(tmp_path: Path, value: str, share: float) -> None:
    text = MINIMAL + f'[policy]\ncapacity_backoff_cap = "1m"\ncapacity_backoff_jitter = {value}\n'
    p = load(tmp_path, text).policy
    assert p.capacity_backoff.jitter == share
    assert p.capacity_backoff.cap == timedelta(minutes=1)
    assert p.transient_backoff.jitter == 1.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [('"30s"', 30), ('"10m"', 600), ('"1h30m"', 5400), ('"1.5h"', 5400), ('"2d"', 172800)],
)
def test_durations(tmp_path: Path, value: str, seconds: float) -> None:
    text = MINIMAL + f'[fleet.workload]\nrun = "x"\nhang_timeout = {value}\n'
    workload = load(tmp_path, text).fleets[0].workload
    assert workload is not None
    assert workload.hang_timeout == seconds


def test_guard_within_limits(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        MINIMAL
        + """
        [guard]
        project = "my-project"
        zones = ["us-central2-b"]
        accelerator_types = ["v4-8"]
        capacity = ["spot"]
        max_nodes = 2
        """,
    )
    assert config.guard is not None
    assert config.guard.capacity == frozenset({CapacityKind.SPOT})


def test_credentials_file_and_http_endpoint(tmp_path: Path) -> None:
    (tmp_path / "key.json").write_text("{}")
    config = load(
        tmp_path,
        MINIMAL.replace(
            'project = "my-project"', 'project = "my-project"\ncredentials = "key.json"'
        ),
    )
    assert config.gcp.credentials == str(tmp_path / "key.json")


# ---------------------------------------------------------------------------------------------
# Finding the file


def test_resolve_prefers_the_argument() -> None:
    assert resolve_config_path("a.toml", {ENV_VAR: "b.toml"}) == Path("a.toml")


def test_resolve_falls_back_to_the_environment() -> None:
    assert resolve_config_path(None, {ENV_VAR: "b.toml"}) == Path("b.toml")


def test_resolve_needs_one_of_them() -> None:
    with pytest.raises(ConfigError, match=f"pass -c FILE or set {ENV_VAR}"):
        resolve_config_path(None, {})
