"""The config file: the examples load, and every mistake is one line naming file and key."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from tpucared.config import (
    ENV_VAR,
    Config,
    ConfigError,
    load_config,
    resolve_config_path,
)
from tpucared.core.model.specs import CapacityKind, OnSuccess, Provisioning, RestartPolicy
from tpucared.core.planning.policy import Policy

EXAMPLES = Path(__file__).resolve().parents[1] / "deploy" / "examples"

MINIMAL = """
[daemon]
db = "state.db"

[gcp]
project = "my-project"

[[fleet]]
name = "sweep"
zones = ["us-central2-b"]
accelerator_type = "v4-8"
runtime_version = "tpu-ubuntu2204-base"
size = 2
"""


def write(tmp_path: Path, text: str, name: str = "fleet.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(tmp_path: Path, text: str) -> Config:
    return load_config(write(tmp_path, text))


def problems(tmp_path: Path, text: str) -> list[str]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    lines = str(info.value).splitlines()
    assert list(info.value.problems) == lines
    prefix = f"{path}: "
    assert all(line.startswith(prefix) for line in lines), lines
    return [line.removeprefix(prefix) for line in lines]


# ---------------------------------------------------------------------------------------------
# What loads


@pytest.mark.parametrize("name", ["emulator.toml", "gce.toml"])
def test_examples_load(name: str) -> None:
    config = load_config(EXAMPLES / name)
    assert config.fleets
    assert config.path == EXAMPLES / name


def test_emulator_example() -> None:
    config = load_config(EXAMPLES / "emulator.toml")
    assert config.gcp.endpoint == "http://127.0.0.1:8471"
    assert config.gcp.credentials == "none"
    demo, sweep = config.fleets
    assert (demo.accelerator_type, demo.size, demo.capacity) == ("v4-32", 1, CapacityKind.SPOT)
    assert demo.workload is not None
    assert demo.workload.max_failures == 5
    assert (sweep.accelerator_type, sweep.size) == ("v4-8", 3)
    assert sweep.zones == ("us-central2-b", "us-central1-a")


def test_gce_example() -> None:
    config = load_config(EXAMPLES / "gce.toml")
    assert config.gcp.endpoint == "https://tpu.googleapis.com"
    assert config.daemon.owner == "trc-main"
    sweep = config.fleet("sweep")
    assert sweep.workload is not None
    assert sweep.workload.secrets == {"WANDB_API_KEY": "WANDB_API_KEY"}
    assert sweep.workload.hang_timeout == 1800.0
    assert config.fleet("big").provisioning is Provisioning.QUEUED
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
    assert (config.daemon.http_host, config.daemon.http_port) == ("127.0.0.1", 9464)
    assert config.daemon.owner == "default"
    assert config.gcp.endpoint == "https://tpu.googleapis.com"
    assert config.gcp.credentials == "default"
    assert config.ssh.key == tmp_path / "id_ed25519"
    assert (config.ssh.user, config.ssh.port, config.ssh.concurrency) == ("tpucared", 22, 64)
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
# What does not load: one row per mistake, each naming the key and what is expected


def gcp(extra: str) -> str:
    return MINIMAL.replace('project = "my-project"', f'project = "my-project"\n{extra}')


def daemon(extra: str) -> str:
    return MINIMAL.replace('db = "state.db"', f'db = "state.db"\n{extra}')


def fleet(extra: str, drop: str | None = None) -> str:
    text = MINIMAL + extra + "\n"
    if drop:
        text = text.replace(drop, "")
    return text


def workload(extra: str) -> str:
    return MINIMAL + f'[fleet.workload]\nrun = "x"\n{extra}\n'


BAD = [
    # id, config text, expected lines (each: key, then the start of the message)
    ("missing-daemon", MINIMAL.replace('[daemon]\ndb = "state.db"', ""), ["daemon: required"]),
    ("missing-db", MINIMAL.replace('db = "state.db"', ""), ["daemon.db: required"]),
    ("unknown-top", MINIMAL + "[fleets]\n", ['fleets: unknown key (did you mean "fleet"?)']),
    (
        "unknown-daemon-key",
        daemon('pol_interval = "5s"'),
        ['daemon.pol_interval: unknown key (did you mean "poll_interval"?)'],
    ),
    ("unknown-key-no-match", daemon("zzz = 1"), ["daemon.zzz: unknown key; allowed here: db,"]),
    (
        "unknown-fleet-key",
        fleet('acelerator = "v4-8"'),
        ['fleet "sweep": acelerator: unknown key (did you mean "accelerator_type"?)'],
    ),
    (
        "unknown-workload-key",
        workload("max_failure = 3"),
        ['fleet "sweep": workload.max_failure: unknown key (did you mean "max_failures"?)'],
    ),
    (
        "unknown-secret-key",
        workload('secrets = { K = { var = "X" } }'),
        [
            'fleet "sweep": workload.secrets.K.var: unknown key',
            'fleet "sweep": workload.secrets.K.env: required',
        ],
    ),
    (
        "bare-number-duration",
        daemon("poll_interval = 10"),
        [
            'daemon.poll_interval: expected a duration string like "30s", "10m", "24h" or '
            '"1h30m", got the bare number 10 (write "10s" for seconds)'
        ],
    ),
    (
        "bad-duration",
        daemon('poll_interval = "10 sec"'),
        ['daemon.poll_interval: expected a duration string like "30s"'],
    ),
    (
        "poll-too-fast",
        daemon('poll_interval = "100ms"'),
        ['daemon.poll_interval: expected "1s" to "10m", got "100ms"'],
    ),
    (
        "bad-http",
        daemon('http = "localhost"'),
        ['daemon.http: expected "host:port" like "127.0.0.1:9464", got "localhost"'],
    ),
    ("bad-http-port", daemon('http = "127.0.0.1:99999"'), ['daemon.http: expected "host:port"']),
    (
        "bad-db-url",
        MINIMAL.replace('"state.db"', '"mysql://me:hunter2@x/y"'),
        [
            'daemon.db: expected a file path, a "sqlite://" or a "postgresql+asyncpg://" URL, '
            'got "mysql://me:***@x/y"'
        ],
    ),
    (
        "db-url-needs-ssh-key",
        MINIMAL.replace('"state.db"', '"sqlite:////var/x.db"'),
        ["ssh.key: required when daemon.db is a URL"],
    ),
    ("bad-owner", daemon('owner = "Ops Team"'), ["daemon.owner: expected an owner id"]),
    (
        "bad-project",
        MINIMAL.replace('"my-project"', '"My Project"'),
        ['gcp.project: expected a project id like "my-project"'],
    ),
    (
        "bad-endpoint",
        gcp('endpoint = "tpu.googleapis.com"'),
        ['gcp.endpoint: expected a base URL like "https://tpu.googleapis.com"'],
    ),
    (
        "http-with-credentials",
        gcp('endpoint = "http://127.0.0.1:8471"'),
        ["gcp.credentials: http://127.0.0.1:8471 is plain http"],
    ),
    (
        "none-against-google",
        gcp('credentials = "none"'),
        ['gcp.credentials: "none" only works with an emulator'],
    ),
    (
        "missing-key-file",
        gcp('credentials = "nope.json"'),
        ['gcp.credentials: expected "default", "none" or an existing key file, got "nope.json"'],
    ),
    (
        "ssh-port-type",
        MINIMAL + '[ssh]\nport = "22"\n',
        ['ssh.port: expected an integer, got "22"'],
    ),
    ("ssh-port-range", MINIMAL + "[ssh]\nport = 0\n", ["ssh.port: expected a number >= 1, got 0"]),
    (
        "ssh-internal-ip-type",
        MINIMAL + '[ssh]\ninternal_ip = "yes"\n',
        ['ssh.internal_ip: expected true or false, got "yes"'],
    ),
    (
        "no-zones",
        MINIMAL.replace('["us-central2-b"]', "[]"),
        ['fleet "sweep": zones: expected at least one zone, got a list'],
    ),
    (
        "duplicate-zone",
        MINIMAL.replace('["us-central2-b"]', '["us-central2-b", "us-central2-b"]'),
        ['fleet "sweep": zones: listed more than once: us-central2-b'],
    ),
    (
        "bad-zone",
        MINIMAL.replace('["us-central2-b"]', '["us-central2"]'),
        ['fleet "sweep": zones[0]: expected a zone like "us-central2-b", got "us-central2"'],
    ),
    (
        "bad-type",
        MINIMAL.replace('"v4-8"', '"v4"'),
        ['fleet "sweep": accelerator_type: expected an accelerator type like "v4-32"'],
    ),
    (
        "negative-size",
        MINIMAL.replace("size = 2", "size = -1"),
        ['fleet "sweep": size: expected a number >= 0, got -1'],
    ),
    (
        "float-size",
        MINIMAL.replace("size = 2", "size = 2.5"),
        ['fleet "sweep": size: expected an integer, got 2.5'],
    ),
    (
        "bad-capacity",
        fleet('capacity = "cheap"'),
        [
            "fleet \"sweep\": capacity: expected one of 'spot', 'preemptible', "
            "'on-demand' or 'reserved', got \"cheap\""
        ],
    ),
    (
        "bad-provisioning",
        fleet('provisioning = "fast"'),
        ["fleet \"sweep\": provisioning: expected one of 'direct' or 'queued', got \"fast\""],
    ),
    (
        "queued-preemptible",
        fleet('capacity = "preemptible"\nprovisioning = "queued"'),
        ['fleet "sweep": capacity: "preemptible" cannot be queued'],
    ),
    (
        "bad-name",
        MINIMAL.replace('name = "sweep"', 'name = "Sweep_1"'),
        ['fleet "Sweep_1": name: expected a lowercase name'],
    ),
    ("unnamed-fleet", MINIMAL.replace('name = "sweep"', ""), ["fleet #1: name: required"]),
    (
        "name-too-long",
        MINIMAL.replace('name = "sweep"', f'name = "{"s" * 61}"').replace("size = 2", "size = 100"),
        [
            f'fleet "{"s" * 61}": name: node names are {"s" * 61}-<slot>, at most 63 characters, '
            f"but {'s' * 61}-99 has 64: shorten the name"
        ],
    ),
    (
        "duplicate-fleet",
        MINIMAL + MINIMAL[MINIMAL.index("[[fleet]]") :],
        ['fleet "sweep": name: also used by fleet #1; must be unique'],
    ),
    (
        "reserved-label",
        fleet('labels = { "tpucared-owner" = "x" }'),
        ['fleet "sweep": labels.tpucared-owner: reserved: tpucared sets it itself'],
    ),
    (
        "bad-label-value",
        fleet('labels = { team = "NLP Team" }'),
        ['fleet "sweep": labels.team: expected a label value'],
    ),
    (
        "bad-label-key",
        fleet('labels = { "9x" = "a" }'),
        ['fleet "sweep": labels.9x: expected a label key'],
    ),
    (
        "workload-without-run",
        MINIMAL + '[fleet.workload]\nsetup = "x"\n',
        ['fleet "sweep": workload.run: required'],
    ),
    (
        "bad-stop-signal",
        workload('stop_signal = "KILL"'),
        ['fleet "sweep": workload.stop_signal: expected a signal the workload can trap'],
    ),
    (
        "long-stop-grace",
        workload('stop_grace = "11m"'),
        ['fleet "sweep": workload.stop_grace: at most 10m'],
    ),
    (
        "ref-without-repository",
        workload('ref = "main"'),
        ['fleet "sweep": workload.ref: set without workload.repository'],
    ),
    (
        "reserved-env",
        workload('env = { TPUCARED_SLOT = "1" }'),
        ['fleet "sweep": workload.env.TPUCARED_SLOT: TPUCARED_* variables are set by tpucared'],
    ),
    (
        "env-and-secret",
        workload('env = { K = "1" }\nsecrets = { K = { env = "K" } }'),
        ['fleet "sweep": workload.secrets.K: also in workload.env; keep one'],
    ),
    (
        "bad-env-name",
        workload('env = { "MY-VAR" = "1" }'),
        ['fleet "sweep": workload.env.MY-VAR: expected an environment variable name'],
    ),
    (
        "secret-value-inline",
        workload('secrets = { K = "hunter2" }'),
        ['fleet "sweep": workload.secrets.K: expected { env = "VARIABLE" }'],
    ),
    (
        "bad-restart",
        workload('restart = "sometimes"'),
        ["fleet \"sweep\": workload.restart: expected one of 'never', 'on-failure' or 'always'"],
    ),
    (
        "negative-budget",
        workload("max_failures = -1"),
        ['fleet "sweep": workload.max_failures: expected a number >= 0, got -1'],
    ),
    (
        "missing-file",
        workload('files = { "nope.txt" = "/tmp/x" }'),
        ['fleet "sweep": workload.files."nope.txt": '],
    ),
    (
        "backoff-cap-below-base",
        MINIMAL + '[policy]\ncapacity_backoff = "1m"\ncapacity_backoff_cap = "30s"\n',
        [
            "policy.capacity_backoff_cap: expected at least policy.capacity_backoff "
            '("1m"), got "30s"'
        ],
    ),
    (
        "capacity-jitter-above-one",
        MINIMAL + "[policy]\ncapacity_backoff_jitter = 1.5\n",
        ["policy.capacity_backoff_jitter: expected a number <= 1.0, got 1.5"],
    ),
    (
        "capacity-jitter-negative",
        MINIMAL + "[policy]\ncapacity_backoff_jitter = -0.1\n",
        ["policy.capacity_backoff_jitter: expected a number >= 0.0, got -0.1"],
    ),
    (
        "capacity-jitter-percent-string",
        MINIMAL + '[policy]\ncapacity_backoff_jitter = "40%"\n',
        ['policy.capacity_backoff_jitter: expected a number, got "40%"'],
    ),
    (
        "capacity-jitter-typo",
        MINIMAL + "[policy]\ncapacity_jitter = 0.2\n",
        ['policy.capacity_jitter: unknown key (did you mean "capacity_backoff_jitter"?)'],
    ),
    (
        "unknown-timeout",
        MINIMAL + '[policy.timeouts]\ncreatng = "1h"\n',
        ['policy.timeouts.creatng: unknown stuck-state timeout (did you mean "creating"?)'],
    ),
    (
        "bad-timeout",
        MINIMAL + '[policy.timeouts]\ncreating = "forever"\n',
        [
            'policy.timeouts.creating: expected a duration string like "30s", "10m", '
            '"24h" or "1h30m", or "never", got "forever"'
        ],
    ),
    (
        "guard-zone",
        MINIMAL + '[guard]\nzones = ["europe-west4-a"]\n',
        [
            'fleet "sweep": zones: "us-central2-b" is not allowed by the guard '
            "(allowed: europe-west4-a)"
        ],
    ),
    (
        "guard-type",
        MINIMAL + '[guard]\naccelerator_types = ["v4-8-typo", "v4-32"]\n',
        ["guard.accelerator_types[0]: expected an accelerator type"],
    ),
    (
        "guard-type-exceeded",
        MINIMAL + '[guard]\naccelerator_types = ["v4-32"]\n',
        ['fleet "sweep": accelerator_type: "v4-8" is not allowed by the guard (allowed: v4-32)'],
    ),
    (
        "guard-capacity",
        fleet('capacity = "on-demand"') + '[guard]\ncapacity = ["spot"]\n',
        ['fleet "sweep": capacity: "on-demand" is not allowed by the guard (allowed: spot)'],
    ),
    (
        "guard-max-nodes",
        MINIMAL + "[guard]\nmax_nodes = 1\n",
        ["guard.max_nodes: the fleets ask for 2 nodes (sweep 2), more than the 1 allowed"],
    ),
    (
        "guard-project",
        MINIMAL + '[guard]\nproject = "other-project"\n',
        ['gcp.project: "my-project" is not allowed by the guard (allowed: other-project)'],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [row[1:] for row in BAD], ids=[row[0] for row in BAD]
)
def test_bad_config(tmp_path: Path, text: str, expected: list[str]) -> None:
    found = problems(tmp_path, text)
    for want in expected:
        assert any(line.startswith(want) for line in found), (want, found)


@pytest.mark.parametrize("http", ["localhost", "127.0.0.1:0", "127.0.0.1:99999"])
def test_a_bad_daemon_http_is_the_only_line(tmp_path: Path, http: str) -> None:
    """One mistake, one line: a wrong [daemon] must not add a guess about ssh.key."""
    found = problems(tmp_path, daemon(f'http = "{http}"'))
    assert len(found) == 1, found
    assert "daemon.http" in found[0]


def test_an_inline_secret_is_not_echoed(tmp_path: Path) -> None:
    found = problems(tmp_path, workload('secrets = { K = "hunter2" }'))
    assert found
    assert not any("hunter2" in line for line in found)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = (
        MINIMAL.replace("size = 2", "size = -1")
        .replace('"v4-8"', '"tpu"')
        .replace('db = "state.db"', 'db = "state.db"\npoll_interval = 10\ncolour = "blue"')
    )
    found = problems(tmp_path, text)
    keys = sorted(line.split(": ")[0] for line in found)
    assert keys == ["daemon.colour", "daemon.poll_interval", 'fleet "sweep"', 'fleet "sweep"']


def test_cross_key_problems_are_reported_together(tmp_path: Path) -> None:
    text = fleet(
        'capacity = "preemptible"\nprovisioning = "queued"\nlabels = { "tpucared-fleet" = "x" }'
    )
    found = problems(tmp_path, text + "[guard]\nmax_nodes = 0\n")
    assert len(found) == 3


def test_not_toml(tmp_path: Path) -> None:
    found = problems(tmp_path, "[daemon\n")
    assert found[0].startswith("not valid TOML: ")
    assert "line 1" in found[0]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read the config: No such file"):
        load_config(tmp_path / "nope.toml")


# ---------------------------------------------------------------------------------------------
# Finding the file


def test_resolve_prefers_the_argument() -> None:
    assert resolve_config_path("a.toml", {ENV_VAR: "b.toml"}) == Path("a.toml")


def test_resolve_falls_back_to_the_environment() -> None:
    assert resolve_config_path(None, {ENV_VAR: "b.toml"}) == Path("b.toml")


def test_resolve_needs_one_of_them() -> None:
    with pytest.raises(ConfigError, match=f"pass -c FILE or set {ENV_VAR}"):
        resolve_config_path(None, {})
