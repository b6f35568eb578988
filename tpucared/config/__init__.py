"""The TOML config file (a contract, see DESIGN.md): load, validate, hand out frozen values.

`load_config(path)` reads the file, validates it in two passes and returns a frozen `Config`
whose fleets are the core's `FleetSpec`s and whose planner tunables are a core `Policy`:
1. shape (pydantic, strict types, unknown keys refused) and per-value rules (durations,
   names, zones, accelerator types, label syntax, ranges);
2. rules across keys (unique fleet names, node-name length, capacity/provisioning combos,
   reserved labels, file paths, credentials vs endpoint, the [guard] budget), run only when
   the shape is right.
Every problem becomes one line `FILE: KEY: what is expected`, where KEY is a dotted path and
a fleet is named by its name (`fleet "sweep": workload.max_failures`); all lines together
are raised as one `ConfigError`. Nothing here reads secret values: `secrets` only names the
daemon's environment variables that hold them.

Decisions worth knowing:
- Durations are strings: "500ms", "30s", "10m", "24h", "2d", "1h30m". Plain numbers are
  refused (is 30 seconds or minutes?) with a hint to write "30s".
- Relative paths (daemon.db, ssh.key, gcp.credentials, workload.files sources) are relative
  to the config file's directory, so the daemon behaves the same from any working directory.
- daemon.owner, the value of the `tpucared-owner` label, defaults to "default". It must be
  stable for the daemon's whole life (a new value orphans every node it made) and distinct
  per daemon when several share a project: set it explicitly then.
- ssh.key defaults to `id_ed25519` next to the database file.
- daemon.poll_interval is "1s" to "10m"; with credentials = "none" (an emulator) it may go
  down to "100ms", for tests and demos.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from tpucared.core.model import durations
from tpucared.core.model.backoff import BackoffRule
from tpucared.core.model.specs import (
    FLEET_LABEL,
    OWNER_LABEL,
    CapacityKind,
    FleetSpec,
    OnSuccess,
    Provisioning,
    RestartPolicy,
    WorkloadSpec,
)
from tpucared.core.nodes.stuck import DEFAULT_TIMEOUTS, with_overrides
from tpucared.core.planning.policy import Policy

ENV_VAR = "TPUCARED_CONFIG"
DEFAULT_ENDPOINT = "https://tpu.googleapis.com"
MAX_NODE_NAME = 63  # RFC 1035 label: what the TPU API accepts as a node id


class ConfigError(Exception):
    """Everything wrong with a config file, one problem per line."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


# ---------------------------------------------------------------------------------------------
# The validated result


@dataclass(frozen=True)
class DaemonConfig:
    db: str  # an absolute path, or a SQLAlchemy URL as written
    poll_interval: float  # seconds
    http_host: str
    http_port: int
    owner: str  # the `tpucared-owner` label value

    @property
    def db_url(self) -> str:
        return self.db if "://" in self.db else f"sqlite+aiosqlite:///{self.db}"


@dataclass(frozen=True)
class GcpConfig:
    project: str
    endpoint: str
    credentials: str  # "default" (ADC), "none" (emulators only) or an absolute key-file path


@dataclass(frozen=True)
class SshConfig:
    user: str
    port: int
    key: Path
    internal_ip: bool
    concurrency: int


@dataclass(frozen=True)
class GuardConfig:
    """Limits a config must stay within (e.g. a TRC grant), so a typo cannot spend money."""

    project: str | None = None
    zones: frozenset[str] | None = None
    accelerator_types: frozenset[str] | None = None
    capacity: frozenset[CapacityKind] | None = None
    max_nodes: int | None = None


@dataclass(frozen=True)
class Config:
    path: Path
    daemon: DaemonConfig
    gcp: GcpConfig
    ssh: SshConfig
    fleets: tuple[FleetSpec, ...]
    policy: Policy
    guard: GuardConfig | None = None

    def fleet(self, name: str) -> FleetSpec:
        for spec in self.fleets:
            if spec.name == name:
                return spec
        raise KeyError(name)


def resolve_config_path(
    arg: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> Path:
    """The config file the CLI should use: `-c ARG` if given, else $TPUCARED_CONFIG."""
    if arg:
        return Path(arg)
    env = os.environ if environ is None else environ
    value = env.get(ENV_VAR)
    if value:
        return Path(value)
    raise ConfigError([f"no config file: pass -c FILE or set {ENV_VAR}"])


def load_config(path: str | os.PathLike[str]) -> Config:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{file}: cannot read the config: {exc.strerror or exc}"]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{file}: the config is not UTF-8 text: {exc.reason}"]) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{file}: not valid TOML: {exc}"]) from exc
    return parse_config(data, file)


def parse_config(data: Mapping[str, Any], file: Path) -> Config:
    """Validate already-parsed TOML; `file` names the source in messages and anchors
    relative paths."""
    try:
        raw = _Root.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([f"{file}: {line}" for line in _shape_problems(exc, data)]) from None
    problems = _Problems()
    config = _build(raw, file, problems)
    if problems:
        raise ConfigError([f"{file}: {key}: {msg}" for key, msg in problems.items])
    assert config is not None
    return config


# ---------------------------------------------------------------------------------------------
# Values with their own syntax


def _got(value: object) -> str:
    """A value as the user wrote it in TOML, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return str(value)


def _fail(expected: str, value: object) -> PydanticCustomError:
    return PydanticCustomError(
        "tpucared",
        "expected {expected}, got {got}",
        {
            "expected": expected,
            "got": _got(value),
        },
    )


_DURATION_EXPECTED = 'a duration string like "30s", "10m", "24h" or "1h30m"'


def parse_duration(value: object) -> timedelta:
    """A config duration: a string for core.durations.parse (plain numbers are refused)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise PydanticCustomError(
            "tpucared",
            'expected {expected}, got the bare number {got} (write "{got}s" for seconds)',
            {"expected": _DURATION_EXPECTED, "got": _got(value)},
        )
    if not isinstance(value, str):
        raise _fail(_DURATION_EXPECTED, value)
    try:
        return durations.parse(value)
    except ValueError:
        raise _fail(f"{_DURATION_EXPECTED}, at most a year", value) from None


def _duration_or_never(value: object) -> timedelta | None:
    if value == "never":
        return None
    try:
        return parse_duration(value)
    except PydanticCustomError:
        raise _fail(f'{_DURATION_EXPECTED}, or "never"', value) from None


def _pattern(regex: str, expected: str) -> BeforeValidator:
    compiled = re.compile(regex)

    def check(value: object) -> str:
        if not isinstance(value, str) or not compiled.fullmatch(value):
            raise _fail(expected, value)
        return value

    return BeforeValidator(check)


def _unique_list(expected: str) -> BeforeValidator:
    def check(value: object) -> object:
        if isinstance(value, list):
            dupes = sorted({str(v) for v in value if value.count(v) > 1})
            if dupes:
                raise PydanticCustomError(
                    "tpucared", "listed more than once: {dupes}", {"dupes": ", ".join(dupes)}
                )
            if not value:
                raise _fail(expected, value)
        return value

    return BeforeValidator(check)


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
DurationOrNever = Annotated[timedelta | None, BeforeValidator(_duration_or_never)]
NonEmpty = Annotated[str, _pattern(r"(?s).*\S.*", "a non-empty string")]
# RFC 1035 label, lowercase: what node ids and label values accept.
FleetName = Annotated[
    str,
    _pattern(
        r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?",
        "a lowercase name: a letter, then letters, digits or '-', not ending in '-'",
    ),
]
Zone = Annotated[str, _pattern(r"[a-z]+-[a-z]+[0-9]+-[a-z]", 'a zone like "us-central2-b"')]
AcceleratorType = Annotated[
    str,
    _pattern(r"v[0-9]+[a-z]*-[1-9][0-9]*", 'an accelerator type like "v4-32" or "v5litepod-16"'),
]
RuntimeVersion = Annotated[
    str, _pattern(r"[a-z0-9][a-z0-9._-]*", 'a runtime version like "tpu-ubuntu2204-base"')
]
LabelKey = Annotated[
    str,
    _pattern(
        r"[a-z][a-z0-9_-]{0,62}",
        "a label key: a lowercase letter, then up to 62 lowercase letters, digits, '_' or '-'",
    ),
]
LabelValue = Annotated[
    str,
    _pattern(r"[a-z0-9_-]{0,63}", "a label value: up to 63 lowercase letters, digits, '_' or '-'"),
]
Owner = Annotated[
    str,
    _pattern(
        r"[a-z0-9][a-z0-9_-]{0,62}",
        "an owner id: up to 63 lowercase letters, digits, '_' or '-', not starting with '_'/'-'",
    ),
]
EnvName = Annotated[
    str,
    _pattern(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name like WANDB_API_KEY"),
]
Project = Annotated[
    str,
    _pattern(
        r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]",
        'a project id like "my-project" (6-30 lowercase letters, digits or "-")',
    ),
]
UserName = Annotated[str, _pattern(r"[a-z_][a-z0-9_-]{0,31}", 'a Unix user name like "tpucared"')]


def _lax() -> Any:
    # Enums come from TOML as strings; strict mode would only accept enum instances.
    return Field(strict=False)


# ---------------------------------------------------------------------------------------------
# Shape: one pydantic model per TOML table


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Daemon(_Table):
    db: NonEmpty
    poll_interval: Duration = timedelta(seconds=10)
    http: NonEmpty = "127.0.0.1:9464"
    owner: Owner = "default"


class _Gcp(_Table):
    project: Project
    endpoint: NonEmpty = DEFAULT_ENDPOINT
    credentials: NonEmpty = "default"


class _Ssh(_Table):
    user: UserName = "tpucared"
    port: int = Field(default=22, ge=1, le=65535)
    key: NonEmpty | None = None
    internal_ip: bool = False
    concurrency: int = Field(default=64, ge=1, le=1024)


class _Secret(_Table):
    env: EnvName


class _Workload(_Table):
    run: NonEmpty
    repository: NonEmpty | None = None
    ref: NonEmpty | None = None
    setup: NonEmpty | None = None
    env: dict[EnvName, str] = Field(default_factory=dict)
    secrets: dict[EnvName, _Secret] = Field(default_factory=dict)
    files: dict[NonEmpty, NonEmpty] = Field(default_factory=dict)
    restart: Annotated[RestartPolicy, _lax()] = RestartPolicy.ON_FAILURE
    max_failures: int = Field(default=10, ge=0)
    hang_timeout: Duration | None = None
    on_success: Annotated[OnSuccess, _lax()] = OnSuccess.DELETE


class _Fleet(_Table):
    name: FleetName
    zones: Annotated[list[Zone], _unique_list("at least one zone")]
    accelerator_type: AcceleratorType
    runtime_version: RuntimeVersion
    size: int = Field(ge=0, le=10000)
    capacity: Annotated[CapacityKind, _lax()] = CapacityKind.SPOT
    provisioning: Annotated[Provisioning, _lax()] = Provisioning.DIRECT
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=62)
    workload: _Workload | None = None


class _Policy(_Table):
    max_creates: int = Field(default=8, ge=1)
    max_creates_per_fleet: int = Field(default=4, ge=1)
    capacity_backoff: Duration = timedelta(seconds=4)
    capacity_backoff_cap: Duration = timedelta(seconds=4)
    # The random share of each capacity wait (1 = full jitter over [0, wait]).
    capacity_backoff_jitter: float = Field(default=0.4, ge=0, le=1)
    transient_backoff: Duration = timedelta(seconds=5)
    transient_backoff_cap: Duration = timedelta(minutes=2)
    error_backoff: Duration = timedelta(minutes=10)
    error_backoff_cap: Duration = timedelta(minutes=30)
    create_grace: Duration = timedelta(minutes=2)
    vanish_grace: Duration = timedelta(seconds=20)
    unhealthy_grace: Duration = timedelta(minutes=10)
    max_delete_calls: int = Field(default=5, ge=1)
    timeouts: dict[str, DurationOrNever] = Field(default_factory=dict)


class _Guard(_Table):
    project: Project | None = None
    zones: Annotated[list[Zone], _unique_list("at least one zone")] | None = None
    accelerator_types: list[AcceleratorType] | None = None
    capacity: list[Annotated[CapacityKind, _lax()]] | None = None
    max_nodes: int | None = Field(default=None, ge=0)


class _Root(_Table):
    daemon: _Daemon
    gcp: _Gcp
    ssh: _Ssh = _Ssh()
    fleet: list[_Fleet] = Field(default_factory=list)
    policy: _Policy = _Policy()
    guard: _Guard | None = None


# ---------------------------------------------------------------------------------------------
# Shape problems -> "KEY: message" lines


def _shape_problems(exc: ValidationError, data: Mapping[str, Any]) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        key = _key(loc, data)
        lines.append(f"{key}: {_message(err, loc)}")
    return list(dict.fromkeys(lines))


def _key(loc: tuple[int | str, ...], data: Mapping[str, Any]) -> str:
    """A dotted TOML path; an item of [[fleet]] is named by its name when it has one."""
    # pydantic marks a problem with a table's key (not its value) by a trailing "[key]".
    if loc and loc[-1] == "[key]":
        loc = loc[:-1]
    if len(loc) >= 2 and loc[0] == "fleet" and isinstance(loc[1], int):
        index = loc[1]
        fleets = data.get("fleet")
        item = fleets[index] if isinstance(fleets, list) and index < len(fleets) else None
        name = item.get("name") if isinstance(item, dict) else None
        head = (
            f"fleet {json.dumps(name)}"
            if isinstance(name, str) and name
            else (f"fleet #{index + 1}")
        )
        rest = _dotted(loc[2:])
        return f"{head}: {rest}" if rest else head
    return _dotted(loc) or "(top level)"


def _dotted(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            piece = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part)
            out += f".{piece}" if out else piece
    return out


def _message(err: Any, loc: tuple[int | str, ...]) -> str:
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return "required, but missing"
    if "secrets" in loc and kind in ("model_type", "model_attributes_type", "dict_type"):
        # Never echo what was written here: it may be the secret itself.
        return 'expected { env = "VARIABLE" }: the name of the daemon\'s environment variable '
        "that holds the secret (secret values never go in the config)"
    if kind == "extra_forbidden":
        known = _known_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        allowed = f"; allowed here: {', '.join(known)}" if known and not close else ""
        return f"unknown key{hint}{allowed}"
    simple = {
        "int_type": "an integer",
        "int_from_float": "an integer",
        "bool_type": "true or false",
        "string_type": "a string",
        "float_type": "a number",
        "list_type": "a list",
        "dict_type": "a table",
        "model_type": "a table",
        "model_attributes_type": "a table",
    }
    if kind in simple:
        return f"expected {simple[kind]}, got {_got(value)}"
    bounds = {
        "greater_than_equal": ">=",
        "greater_than": ">",
        "less_than_equal": "<=",
        "less_than": "<",
    }
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"expected a number {bounds[kind]} {limit}, got {_got(value)}"
    if kind == "enum":
        return f"expected one of {ctx.get('expected')}, got {_got(value)}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"expected at most {ctx.get('max_length')} item(s)"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def _known_keys(loc: Sequence[int | str]) -> list[str]:
    """The keys the table at `loc` accepts (for "did you mean")."""
    tp: Any = _Root
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(part, int):
            args = get_args(tp)
            tp = args[0] if args else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part)
            tp = field.annotation if field else None
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return list(tp.model_fields)
    if tp is None and loc and loc[-1] == "timeouts":
        return list(DEFAULT_TIMEOUTS)
    return []


def _unwrap(tp: Any) -> Any:
    """Strip Annotated[...] and `| None` to the type that holds the keys."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, UnionType):
            options = [a for a in get_args(tp) if a is not type(None)]
            tp = options[0] if len(options) == 1 else None
        else:
            return tp


# ---------------------------------------------------------------------------------------------
# Rules across keys, and the frozen result


class _Problems:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, key: str, message: str) -> None:
        self.items.append((key, message))

    def __bool__(self) -> bool:
        return bool(self.items)


def _build(raw: _Root, file: Path, problems: _Problems) -> Config | None:
    base = file.parent
    daemon = _daemon(raw.daemon, base, problems, emulator=raw.gcp.credentials == "none")
    gcp = _gcp(raw.gcp, base, problems)
    ssh = _ssh(raw.ssh, daemon, base, problems)
    fleets = _fleets(raw.fleet, base, problems)
    policy = _policy(raw.policy, problems)
    guard = _guard(raw.guard, raw, problems)
    if problems or daemon is None or gcp is None or ssh is None or policy is None:
        return None
    return Config(
        path=file, daemon=daemon, gcp=gcp, ssh=ssh, fleets=fleets, policy=policy, guard=guard
    )


def _resolve(base: Path, value: str) -> Path:
    return (base / Path(value).expanduser()).resolve()


def _daemon(
    raw: _Daemon, base: Path, problems: _Problems, *, emulator: bool
) -> DaemonConfig | None:
    db = raw.db
    if "://" not in db:
        db = str(_resolve(base, db))
    elif not re.match(r"sqlite(\+aiosqlite)?://", db):
        problems.add("daemon.db", f'expected a file path or a "sqlite://" URL, got {_got(db)}')
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
            "daemon.http", f'expected "host:port" like "127.0.0.1:9464", got {_got(raw.http)}'
        )
        return None
    return DaemonConfig(
        db=db, poll_interval=seconds, http_host=host, http_port=int(port), owner=raw.owner
    )


def _gcp(raw: _Gcp, base: Path, problems: _Problems) -> GcpConfig | None:
    url = urlsplit(raw.endpoint)
    if url.scheme not in ("http", "https") or not url.netloc or url.path not in ("", "/"):
        problems.add(
            "gcp.endpoint",
            f'expected a base URL like "{DEFAULT_ENDPOINT}" or "http://127.0.0.1:8471", '
            f"got {_got(raw.endpoint)}",
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
                f'expected "default", "none" or an existing key file, got {_got(credentials)} '
                f"({key} does not exist)",
            )
        credentials = str(key)
    return GcpConfig(project=raw.project, endpoint=endpoint, credentials=credentials)


def _ssh(
    raw: _Ssh, daemon: DaemonConfig | None, base: Path, problems: _Problems
) -> SshConfig | None:
    if raw.key is not None:
        key = _resolve(base, raw.key)
    elif daemon is not None and "://" not in daemon.db:
        key = Path(daemon.db).parent / "id_ed25519"
    else:
        problems.add("ssh.key", "required when daemon.db is a URL (there is no directory to use)")
        return None
    return SshConfig(
        user=raw.user,
        port=raw.port,
        key=key,
        internal_ip=raw.internal_ip,
        concurrency=raw.concurrency,
    )


def _fleets(raws: Sequence[_Fleet], base: Path, problems: _Problems) -> tuple[FleetSpec, ...]:
    specs = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raws):
        at = f"fleet {json.dumps(raw.name)}"
        if raw.name in seen:
            problems.add(f"{at}: name", f"also used by fleet #{seen[raw.name] + 1}; must be unique")
        seen.setdefault(raw.name, i)
        longest = f"{raw.name}-{max(raw.size - 1, 0)}"
        if len(longest) > MAX_NODE_NAME:
            problems.add(
                f"{at}: name",
                f"node names are {raw.name}-<slot>, at most {MAX_NODE_NAME} characters, "
                f"but {longest} has {len(longest)}: shorten the name",
            )
        if raw.provisioning is Provisioning.QUEUED and raw.capacity is CapacityKind.PREEMPTIBLE:
            problems.add(
                f"{at}: capacity",
                '"preemptible" cannot be queued (queued resources offer spot, on-demand and '
                'reserved capacity): use "spot", or provisioning = "direct"',
            )
        for reserved in (FLEET_LABEL, OWNER_LABEL):
            if reserved in raw.labels:
                problems.add(f"{at}: labels.{reserved}", "reserved: tpucared sets it itself")
        workload = _workload(raw.workload, at, base, problems) if raw.workload else None
        specs.append(
            FleetSpec(
                name=raw.name,
                zones=tuple(raw.zones),
                accelerator_type=raw.accelerator_type,
                runtime_version=raw.runtime_version,
                size=raw.size,
                capacity=raw.capacity,
                provisioning=raw.provisioning,
                labels=dict(raw.labels),
                workload=workload,
            )
        )
    return tuple(specs)


def _workload(raw: _Workload, at: str, base: Path, problems: _Problems) -> WorkloadSpec:
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
            problems.add(f"{at}: workload.files.{_dotted([local])}", f"{source} does not exist")
        files[str(source)] = remote
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
    )


def _policy(raw: _Policy, problems: _Problems) -> Policy | None:
    rules = {}
    for name in ("capacity", "transient", "error"):
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
                f"policy.timeouts.{_dotted([name])}",
                f"unknown stuck-state timeout{hint}; known: {', '.join(DEFAULT_TIMEOUTS)}",
            )
    if problems or len(rules) < 3:
        return None
    return Policy(
        max_creates=raw.max_creates,
        max_creates_per_fleet=raw.max_creates_per_fleet,
        capacity_backoff=rules["capacity"],
        transient_backoff=rules["transient"],
        error_backoff=rules["error"],
        create_grace=raw.create_grace,
        vanish_grace=raw.vanish_grace,
        unhealthy_grace=raw.unhealthy_grace,
        max_delete_calls=raw.max_delete_calls,
        timeouts=with_overrides(raw.timeouts),
    )


def _guard(raw: _Guard | None, root: _Root, problems: _Problems) -> GuardConfig | None:
    if raw is None:
        return None
    guard = GuardConfig(
        project=raw.project,
        zones=None if raw.zones is None else frozenset(raw.zones),
        accelerator_types=None
        if raw.accelerator_types is None
        else frozenset(raw.accelerator_types),
        capacity=None if raw.capacity is None else frozenset(raw.capacity),
        max_nodes=raw.max_nodes,
    )
    if guard.project is not None and root.gcp.project != guard.project:
        problems.add(
            "gcp.project",
            f"expected guard.project {_got(guard.project)}, got {_got(root.gcp.project)}",
        )
    for fleet in root.fleet:
        at = f"fleet {json.dumps(fleet.name)}"
        checks: list[tuple[str, list[str], frozenset[str] | None]] = [
            ("zones", list(fleet.zones), guard.zones),
            ("accelerator_type", [fleet.accelerator_type], guard.accelerator_types),
            ("capacity", [fleet.capacity.value], _values(guard.capacity)),
        ]
        for key, wanted, allowed in checks:
            for value in wanted:
                if allowed is not None and value not in allowed:
                    problems.add(
                        f"{at}: {key}",
                        f"{_got(value)} is not allowed by the guard "
                        f"(allowed: {', '.join(sorted(allowed)) or 'nothing'})",
                    )
    total = sum(f.size for f in root.fleet)
    if guard.max_nodes is not None and total > guard.max_nodes:
        sizes = ", ".join(f"{f.name} {f.size}" for f in root.fleet)
        problems.add(
            "guard.max_nodes",
            f"the fleets ask for {total} nodes ({sizes}), more than the {guard.max_nodes} allowed",
        )
    return guard


def _values(kinds: frozenset[CapacityKind] | None) -> frozenset[str] | None:
    return None if kinds is None else frozenset(k.value for k in kinds)


def _fmt(d: timedelta) -> str:
    return json.dumps(durations.fmt(d))
