"""Rules across keys, and the frozen values: a validated `ConfigFile` becomes a `Config`.

Pass two of the validation, run only when `schema.py` accepted the shape: unique fleet
names, node-name length, capacity/provisioning combos, reserved labels, file paths,
credentials vs endpoint, backoff and stuck-timeout tunables into a core `Policy`, and the
`[guard]` budget (`guard.py`). Every problem is collected in a `Problems`, not just the
first, and no `Config` is made if there is any. Nothing here reads secret values: `secrets`
only names the daemon's environment variables that hold them.

Decisions worth knowing:
- Relative paths (daemon.db, ssh.key, gcp.credentials, workload.files sources) are relative
  to the config file's directory, so the daemon behaves the same from any working directory.
- daemon.owner, the value of the `tpucared-owner` label, defaults to "default". It must be
  stable for the daemon's whole life (a new value orphans every node it made) and distinct
  per daemon when several share a project: set it explicitly then.
- ssh.key defaults to `id_ed25519` next to the database file.
- daemon.db is a file path, a `sqlite://` URL or a PostgreSQL URL (`postgresql+asyncpg://`,
  `postgresql://`, `postgres://`); a password in a URL is never repeated in a message.
- daemon.poll_interval is "1s" to "10m"; with credentials = "none" (an emulator) it may go
  down to "100ms", for tests and demos.
- daemon.lease (the leader lease) is longer than daemon.poll_interval: a lease shorter than
  one poll would lapse during an ordinary tick. Left out, it is 15 s or a poll and a half,
  whichever is longer.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from tpucared.config.apis import (
    affinity_value,
    check_api_keys,
    machine,
    max_run_duration_s,
    on_preemption,
    reservation_bound,
    topology,
)
from tpucared.config.guard import build_guard
from tpucared.config.messages import dotted
from tpucared.config.node_options import node_options
from tpucared.config.prices import build_prices
from tpucared.config.problems import Problems
from tpucared.config.schema import (
    DEFAULT_ENDPOINT,
    ConfigFile,
    DaemonTable,
    FleetTable,
    GcpTable,
    NotifyTable,
    PolicyTable,
    SshTable,
    WorkloadTable,
)
from tpucared.config.syntax import COMPUTE_API, as_written
from tpucared.config.values import Config, DaemonConfig, GcpConfig, SshConfig
from tpucared.core.leadership.lease import default_lease, lease_problem
from tpucared.core.model import durations
from tpucared.core.model.backoff import BackoffRule
from tpucared.core.model.specs import (
    DEFAULT_PROJECT,
    RESERVED_LABELS,
    CapacityKind,
    FleetSpec,
    Provisioning,
    WorkloadSpec,
)
from tpucared.core.notify.spec import NotifySpec
from tpucared.core.vocab.policy import Policy
from tpucared.core.vocab.stuck import DEFAULT_TIMEOUTS, with_overrides
from tpucared.ports.cloud import SOFTWARE_KEY

MIN_EVENTS_RETENTION = timedelta(days=1)
MIN_NOTIFY_INTERVAL = timedelta(seconds=10)
MAX_STOP_GRACE = timedelta(minutes=10)
MAX_NODE_NAME = 63  # RFC 1035 label: what the TPU API accepts as a node id
MAX_LABELS = 64  # labels a node or instance may carry (Node.labels, Instance.labels)


def build_config(raw: ConfigFile, file: Path, problems: Problems) -> Config | None:
    """The frozen `Config`, or None with every rule broken added to `problems`."""
    base = file.parent
    daemon = _daemon(raw.daemon, base, problems, emulator=raw.gcp.credentials == "none")
    gcp = _gcp(raw.gcp, base, problems)
    ssh = _ssh(raw.ssh, daemon, base, problems)
    fleets = _fleets(raw.fleet, base, problems, own_project=raw.gcp.project)
    policy = _policy(raw.policy, problems)
    guard = build_guard(raw.guard, raw, problems)
    notify = _notify(raw.notify, problems)
    prices = build_prices(raw.prices, problems)
    if problems or daemon is None or gcp is None or ssh is None or policy is None:
        return None
    return Config(
        path=file,
        daemon=daemon,
        gcp=gcp,
        ssh=ssh,
        fleets=fleets,
        policy=policy,
        guard=guard,
        notify=notify,
        prices=prices,
    )


def _notify(raws: Sequence[NotifyTable], problems: Problems) -> tuple[NotifySpec, ...]:
    """The webhooks. A URL is checked for shape only and never echoed back: it is a secret."""
    specs = []
    for i, raw in enumerate(raws):
        at = f"notify[{i}]"
        name = raw.name or f"notify-{i + 1}"
        if (raw.url is None) == (raw.url_env is None):
            problems.add(at, "expected one of url or url_env (the variable holding the url)")
        if raw.url is not None:
            parts = urlsplit(raw.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                problems.add(f"{at}.url", 'expected an "https://host/..." url (not shown: secret)')
        if raw.min_interval < MIN_NOTIFY_INTERVAL:
            problems.add(
                f"{at}.min_interval", f'expected "10s" or more, got {_fmt(raw.min_interval)}'
            )
        specs.append(
            NotifySpec(
                name=name,
                url=raw.url,
                url_env=raw.url_env,
                format=raw.format,
                on=frozenset(raw.on),
                stockout_after=raw.stockout_after,
                min_interval=raw.min_interval,
            )
        )
    for dup in sorted({s.name for s in specs if [t.name for t in specs].count(s.name) > 1}):
        problems.add("notify", f"name {dup!r} used by more than one [[notify]]")
    return tuple(specs)


# The database URLs tpucared runs on: SQLite, and PostgreSQL through asyncpg (sync drivers are
# mapped to it by store.engine).
_DB_URL = r"(sqlite(\+(aiosqlite|pysqlite))?|postgres(ql)?(\+(asyncpg|psycopg2?))?)://"


def _hide_password(url: str) -> str:
    """`scheme://user:***@host/...`: a URL's password never goes into a message."""
    return re.sub(r"^([^:/]+://[^:/@]*:).*@", r"\1***@", url)


def _resolve(base: Path, value: str) -> Path:
    return (base / Path(value).expanduser()).resolve()


def _daemon(
    raw: DaemonTable, base: Path, problems: Problems, *, emulator: bool
) -> DaemonConfig | None:
    db = raw.db
    if "://" not in db:
        db = str(_resolve(base, db))
    elif not re.match(_DB_URL, db):
        problems.add(
            "daemon.db",
            'expected a file path, a "sqlite://" or a "postgresql+asyncpg://" URL, '
            f"got {as_written(_hide_password(db))}",
        )
    seconds = raw.poll_interval.total_seconds()
    # Every tick lists every zone: below 1s that burns the real API's quota. An emulator
    # (credentials "none") answers in microseconds, and tests want sub-second ticks.
    low, low_text = (0.1, "100ms") if emulator else (1.0, "1s")
    if not low <= seconds <= 600:
        problems.add(
            "daemon.poll_interval",
            f'expected "{low_text}" to "10m", got {_fmt(raw.poll_interval)}',
        )
    host, sep, port = raw.http.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        problems.add(
            "daemon.http", f'expected "host:port" like "127.0.0.1:9464", got {as_written(raw.http)}'
        )
        return None
    retention = raw.events_retention
    # Event-derived metrics (recovery time) read back to a loss that may be days old.
    if retention is not None and retention < MIN_EVENTS_RETENTION:
        problems.add(
            "daemon.events_retention", f'expected "1d" or more, or "never", got {_fmt(retention)}'
        )
    lease = default_lease(seconds) if raw.lease is None else raw.lease.total_seconds()
    problem = lease_problem(lease, seconds)
    if problem is not None and raw.lease is not None:
        problems.add("daemon.lease", f"{problem}, got {_fmt(raw.lease)}")
    return DaemonConfig(
        db=db,
        poll_interval=seconds,
        lease=lease,
        http_host=host,
        http_port=int(port),
        owner=raw.owner,
        events_retention=None if retention is None else retention.total_seconds(),
        start_checks=raw.start_checks,
        http_token_env=raw.http_token_env,
    )


def _gcp(raw: GcpTable, base: Path, problems: Problems) -> GcpConfig | None:
    url = urlsplit(raw.endpoint)
    if url.scheme not in ("http", "https") or not url.netloc or url.path not in ("", "/"):
        problems.add(
            "gcp.endpoint",
            f'expected a base URL like "{DEFAULT_ENDPOINT}" or "http://127.0.0.1:8471", '
            f"got {as_written(raw.endpoint)}",
        )
        return None
    endpoint = raw.endpoint.rstrip("/")
    credentials = raw.credentials
    if credentials == "none":
        if (url.hostname or "").endswith("googleapis.com"):
            problems.add(
                "gcp.credentials",
                f'"none" only works with an emulator; {endpoint} needs "default" or a key file',
            )
        return GcpConfig(project=raw.project, endpoint=endpoint, credentials=credentials)
    if url.scheme == "http":
        problems.add(
            "gcp.credentials",
            f"{endpoint} is plain http and would get Google credentials in the clear; "
            'use "none" for an emulator',
        )
    if credentials != "default":
        key = _resolve(base, credentials)
        if not key.is_file():
            problems.add(
                "gcp.credentials",
                'expected "default", "none" or an existing key file, '
                f"got {as_written(credentials)} ({key} does not exist)",
            )
        credentials = str(key)
    return GcpConfig(project=raw.project, endpoint=endpoint, credentials=credentials)


def _ssh(
    raw: SshTable, daemon: DaemonConfig | None, base: Path, problems: Problems
) -> SshConfig | None:
    if raw.key is not None:
        key = _resolve(base, raw.key)
    elif daemon is None:
        return None  # [daemon] was wrong and is reported: a guess about ssh.key would mislead
    elif "://" not in daemon.db:
        key = Path(daemon.db).parent / "id_ed25519"
    else:
        problems.add("ssh.key", "required when daemon.db is a URL (there is no directory to use)")
        return None
    if raw.os_login and "user" in raw.model_fields_set:
        problems.add("ssh.user", "OS Login names the user (its login profile's): remove ssh.user")
    if raw.os_login_account is not None and not raw.os_login:
        problems.add("ssh.os_login_account", "needs ssh.os_login = true")
    return SshConfig(
        user=raw.user,
        port=raw.port,
        key=key,
        internal_ip=raw.internal_ip,
        concurrency=raw.concurrency,
        probe_rate=raw.probe_rate,
        os_login=raw.os_login,
        os_login_account=raw.os_login_account,
    )


def _fleets(
    raws: Sequence[FleetTable], base: Path, problems: Problems, *, own_project: str
) -> tuple[FleetSpec, ...]:
    specs = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raws):
        at = f"fleet {json.dumps(raw.name)}"
        if raw.name in seen:
            problems.add(f"{at}: name", f"also used by fleet #{seen[raw.name] + 1}; must be unique")
        seen.setdefault(raw.name, i)
        _check_fleet(raw, at, problems)
        specs.append(_fleet_spec(raw, at, base, problems, own_project=own_project))
    return tuple(specs)


def _check_fleet(raw: FleetTable, at: str, problems: Problems) -> None:
    """The rules between a fleet's keys that no single key's type can say."""
    longest = f"{raw.name}-{max(raw.size - 1, 0)}"
    pattern = f"{raw.name}-<slot>"
    if raw.slices > 1:
        longest, pattern = f"{longest}-{raw.slices - 1}", f"{pattern}-<slice>"
    if len(longest) > MAX_NODE_NAME:
        problems.add(
            f"{at}: name",
            f"node names are {pattern}, at most {MAX_NODE_NAME} characters, "
            f"but {longest} has {len(longest)}: shorten the name",
        )
    if raw.slices > 1 and len(raw.labels) > MAX_LABELS - len(RESERVED_LABELS):
        # Google allows 64 labels a resource; a multislice node carries our four.
        problems.add(
            f"{at}: labels",
            f"at most {MAX_LABELS - len(RESERVED_LABELS)} with slices > 1 (tpucared adds "
            f"{len(RESERVED_LABELS)} of the {MAX_LABELS} a node may have), got {len(raw.labels)}",
        )
    if "multislice_hold" in raw.model_fields_set and raw.slices == 1:
        problems.add(f"{at}: multislice_hold", "needs slices > 1 (a multislice fleet)")
    if raw.multislice_hold < timedelta(0):
        problems.add(f"{at}: multislice_hold", "expected zero or more")
    if raw.provisioning is Provisioning.QUEUED and raw.capacity is CapacityKind.PREEMPTIBLE:
        problems.add(
            f"{at}: capacity",
            '"preemptible" cannot be queued (queued resources offer spot, on-demand and '
            'reserved capacity): use "spot", or provisioning = "direct"',
        )
    for reserved in RESERVED_LABELS:
        if reserved in raw.labels:
            problems.add(f"{at}: labels.{reserved}", "reserved: tpucared sets it itself")
    check_api_keys(raw, at, problems)


def _fleet_spec(
    raw: FleetTable, at: str, base: Path, problems: Problems, *, own_project: str
) -> FleetSpec:
    workload = _workload(raw.workload, at, base, problems) if raw.workload else None
    node = node_options(
        at,
        zones=raw.zones,
        capacity=raw.capacity,
        provisioning=raw.provisioning,
        network=raw.network,
        subnetwork=raw.subnetwork,
        service_account=raw.service_account,
        service_account_scopes=raw.service_account_scopes,
        tags=raw.tags,
        metadata=raw.metadata,
        data_disks=[(d.source, d.mode) for d in raw.data_disks],
        reservation=raw.reservation,
        problems=problems,
        api=raw.api,
        on_preemption=on_preemption(raw),
        topology=topology(raw),
        max_run_duration_s=max_run_duration_s(raw),
        reservation_bound=reservation_bound(raw),
    )
    project = DEFAULT_PROJECT if raw.project in (None, own_project) else str(raw.project)
    what, boots = machine(raw)
    if raw.api == COMPUTE_API:
        affinity = affinity_value(raw.reservation, raw.project or own_project)
        node = replace(node, reservation=affinity)
    return FleetSpec(
        name=raw.name,
        zones=tuple(raw.zones),
        accelerator_type=what,
        extra={SOFTWARE_KEY: boots},
        size=raw.size,
        capacity=raw.capacity,
        provisioning=raw.provisioning,
        labels=dict(raw.labels),
        workload=workload,
        node=node,
        # The daemon's own project is the core's DEFAULT_PROJECT however it is spelled:
        # naming it changes neither the spec hash nor where the nodes are recorded.
        project=project,
        slices=raw.slices,
        multislice_hold=raw.multislice_hold.total_seconds(),
        api=raw.api,
    )


def _workload(raw: WorkloadTable, at: str, base: Path, problems: Problems) -> WorkloadSpec:
    if raw.ref is not None and raw.repository is None:
        problems.add(f"{at}: workload.ref", "set without workload.repository (a ref of what?)")
    for table, names in (("env", raw.env), ("secrets", raw.secrets)):
        for name in names:
            if name.startswith("TPUCARED_"):
                problems.add(
                    f"{at}: workload.{table}.{name}", "TPUCARED_* variables are set by tpucared"
                )
    for name in raw.secrets:
        if name in raw.env:
            problems.add(f"{at}: workload.secrets.{name}", "also in workload.env; keep one")
    files = {}
    for local, remote in raw.files.items():
        source = _resolve(base, local)
        if not source.exists():
            problems.add(f"{at}: workload.files.{dotted([local])}", f"{source} does not exist")
        files[str(source)] = remote
    if not timedelta(seconds=1) <= raw.health_check_timeout <= timedelta(minutes=10):
        problems.add(f"{at}: workload.health_check_timeout", "between 1s and 10m")
    if raw.stop_grace > MAX_STOP_GRACE:
        problems.add(
            f"{at}: workload.stop_grace",
            "at most 10m: a preempted VM is powered off about 30 s after its notice",
        )
    lead = raw.maintenance_lead
    if not max(raw.stop_grace, timedelta(seconds=10)) <= lead <= timedelta(hours=1):
        problems.add(
            f"{at}: workload.maintenance_lead",
            "between workload.stop_grace (the workload must have stopped before the window "
            "starts) and 1h, and at least 10s",
        )
    return WorkloadSpec(
        run=raw.run,
        repository=raw.repository,
        ref=raw.ref,
        setup=raw.setup,
        env=dict(raw.env),
        secrets={name: secret.env for name, secret in raw.secrets.items()},
        files=files,
        restart=raw.restart,
        max_failures=raw.max_failures,
        hang_timeout=raw.hang_timeout.total_seconds() if raw.hang_timeout else None,
        on_success=raw.on_success,
        stop_signal=raw.stop_signal.removeprefix("SIG"),
        stop_grace=raw.stop_grace.total_seconds(),
        health_check=raw.health_check,
        health_check_timeout=raw.health_check_timeout.total_seconds(),
        max_bad_hosts=raw.max_bad_hosts,
        on_maintenance=raw.on_maintenance,
        maintenance_lead=lead.total_seconds(),
    )


def _policy(raw: PolicyTable, problems: Problems) -> Policy | None:
    rules = {}
    for name in ("capacity", "transient", "error", "defect"):
        base: timedelta = getattr(raw, f"{name}_backoff")
        cap: timedelta = getattr(raw, f"{name}_backoff_cap")
        if base <= timedelta(0):
            problems.add(f"policy.{name}_backoff", f"expected more than zero, got {_fmt(base)}")
        elif cap < base:
            problems.add(
                f"policy.{name}_backoff_cap",
                f"expected at least policy.{name}_backoff ({_fmt(base)}), got {_fmt(cap)}",
            )
        else:
            # The error backoff never retries sooner than its base: a person must act first.
            floor = base if name == "error" else timedelta(0)
            # Only capacity hunting has a tunable jitter; the others keep full jitter.
            share = raw.capacity_backoff_jitter if name == "capacity" else 1.0
            rules[name] = BackoffRule(base=base, cap=cap, floor=floor, jitter=share)
    for name in raw.timeouts:
        if name not in DEFAULT_TIMEOUTS:
            close = difflib.get_close_matches(name, list(DEFAULT_TIMEOUTS), n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            problems.add(
                f"policy.timeouts.{dotted([name])}",
                f"unknown stuck-state timeout{hint}; known: {', '.join(DEFAULT_TIMEOUTS)}",
            )
    if problems or len(rules) < 4:
        return None
    return Policy(
        creates_per_minute=raw.creates_per_minute,
        max_creates=raw.max_creates,
        max_creates_per_fleet=raw.max_creates_per_fleet,
        capacity_backoff=rules["capacity"],
        transient_backoff=rules["transient"],
        error_backoff=rules["error"],
        defect_backoff=rules["defect"],
        create_grace=raw.create_grace,
        vanish_grace=raw.vanish_grace,
        unhealthy_grace=raw.unhealthy_grace,
        max_delete_calls=raw.max_delete_calls,
        timeouts=with_overrides(raw.timeouts),
    )


def _fmt(d: timedelta) -> str:
    return json.dumps(durations.fmt(d))
