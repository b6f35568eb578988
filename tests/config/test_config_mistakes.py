"""The config file: what does not load. One row per mistake, each one line naming the file,
the key and what is expected."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_support import MINIMAL, daemon, fleet, gcp, problems, workload

from tpucared.config import ConfigError, load_config

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
        "lease-not-longer-than-the-poll",
        daemon('poll_interval = "20s"\nlease = "15s"'),
        ['daemon.lease: must be longer than daemon.poll_interval (20s), got "15s"'],
    ),
    (
        "lease-too-short",
        daemon('lease = "5s"'),
        ['daemon.lease: must be longer than daemon.poll_interval (10s), got "5s"'],
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
        "probe-rate-zero",
        MINIMAL + "[ssh]\nprobe_rate = 0\n",
        ["ssh.probe_rate: expected a number >= 1, got 0"],
    ),
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
        [
            'fleet "sweep": zones[0]: expected a zone like "us-central2-b" or '
            '"us-central1-ai1a", got "us-central2"'
        ],
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
            "'on-demand', 'reserved' or 'flex-start', got \"cheap\""
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
