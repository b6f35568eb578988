"""The daemon's config file as the benchmarks and the tests write it: one builder, so that each
place that starts a daemon (bench/detection.py, recovery_rig.py, scale_procs.py, takeover.py;
tests/runtime/runtime_support.py, tests/config_support.py and the CLI, store and gcp tests)
says only what differs from a config that works.

It lives in bench/ because the benchmarks cannot import from tests/, while the tests already
import bench/ (tests/conftest.py puts the repository on their path). It is not in the package:
tpucared has no use for writing configs (a person writes one from deploy/*.toml and
docs/daemon.md), and a public builder would be one more interface to keep stable.

A config is a plain mapping of TOML tables, built from defaults and laid-over differences:

- `minimal(...)`: the least the loader takes (a database, a project, one fleet of two), for
  tests about the file itself;
- `against_emulator(endpoint, ...)`: a daemon run against the emulator at `endpoint`: no
  credentials, its key next to the database, a 300 ms poll, an HTTP port nobody uses, no
  preflight checks at start (`daemon.start_checks = false`: many tests count requests);
- `fleet(...)`: one [[fleet]] table, "sweep" of one v4-8 slice in us-central2-b unless told;
- `render(config)`: the TOML text, `write(path, config)` the file.

A difference is a mapping or a TOML fragment (`'os_login = true'`, `'[policy]\\n...'`): a
table is laid over a table key by key, an array of tables (more `[[fleet]]`) is appended to,
anything else replaces, and None drops the key (a config without `http`, a fleet without
`capacity`).
"""

from __future__ import annotations

import json
import re
import textwrap
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import free_port

ZONE = "us-central2-b"
RUNTIME = "tpu-ubuntu2204-base"
PROJECT = "test-project"
OWNER = "tests"

Config = dict[str, Any]
Difference = Mapping[str, Any] | str | None  # a mapping or a TOML fragment; None: drop it


def fleet(name: str = "sweep", **keys: Any) -> Config:
    """One [[fleet]] table: `name`, one v4-8 slice in ZONE, with `keys` laid over it (a
    `workload` mapping or fragment becomes its [fleet.workload])."""
    if isinstance(keys.get("workload"), str):
        keys["workload"] = parse(keys["workload"])
    base = {
        "name": name,
        "zones": [ZONE],
        "accelerator_type": "v4-8",
        "runtime_version": RUNTIME,
        "size": 1,
    }
    return laid_over(base, keys)


def minimal(*fleets: Mapping[str, Any], more: Difference = None, **tables: Difference) -> Config:
    """The least a config may say: `daemon.db`, `gcp.project` and `fleets` (one "sweep" of
    two slices when none is given); `tables` are laid over by name, then `more`."""
    base: Config = {"daemon": {"db": "state.db"}, "gcp": {"project": "my-project"}}
    return _config(base, fleets or (fleet(size=2),), tables, more)


def against_emulator(
    endpoint: str,
    *fleets: Mapping[str, Any],
    project: str = PROJECT,
    owner: str = OWNER,
    poll: str = "300ms",
    more: Difference = None,
    **tables: Difference,
) -> Config:
    """The daemon against the emulator (or anything) at `endpoint`, with `fleets` (none unless
    given); `tables` (daemon=, gcp=, ssh=, policy=, ...) are laid over by name, then `more`."""
    base: Config = {
        "daemon": {
            "db": "state.db",
            "poll_interval": poll,
            "owner": owner,
            "http": f"127.0.0.1:{free_port()}",
            # Off: tests count the emulator's requests; tests/preflight turns it on.
            "start_checks": False,
        },
        "gcp": {"project": project, "endpoint": endpoint, "credentials": "none"},
        "ssh": {"key": "id_ed25519"},
    }
    return _config(base, fleets, tables, more)


def write(path: Path, config: Mapping[str, Any]) -> Path:
    path.write_text(render(config), encoding="utf-8")
    return path


def parse(fragment: str) -> Config:
    """A TOML fragment (indented or not) as a mapping."""
    return tomllib.loads(textwrap.dedent(fragment))


def laid_over(base: Mapping[str, Any], difference: Difference) -> Config:
    """`base` with `difference` laid over it (see the module's docstring); `base` is kept."""
    if isinstance(difference, str):
        difference = parse(difference)
    out = dict(base)
    for key, value in (difference or {}).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = laid_over(out[key], value)
        elif _tables(value) and _tables(out.get(key)):
            out[key] = [*out[key], *value]
        elif isinstance(value, Mapping):
            out[key] = laid_over({}, value)
        else:
            out[key] = value
    return out


def _config(
    base: Config,
    fleets: Sequence[Mapping[str, Any]],
    tables: Mapping[str, Difference],
    more: Difference,
) -> Config:
    config = dict(base)
    for name, difference in tables.items():
        if difference is None:
            config.pop(name, None)
        elif isinstance(difference, str | Mapping):  # a table: laid over the default one
            config[name] = laid_over(config.get(name) or {}, difference)
        else:  # an array of tables ([[notify]]), as given
            config[name] = difference
    if fleets:
        config["fleet"] = [dict(f) for f in fleets]
    return laid_over(config, more)


def _tables(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


# ---------------------------------------------------------------------------------------------
# TOML text


def render(config: Mapping[str, Any]) -> str:
    """TOML for `config`: each table under its header (a table within a table as
    [outer.inner], an array of tables as [[name]]), plain keys before the tables within."""
    blocks: list[str] = []
    _table(blocks, (), config, array=False)
    return "\n".join(block for block in blocks if block).rstrip("\n") + "\n"


def _table(blocks: list[str], path: tuple[str, ...], table: Mapping[str, Any], array: bool) -> None:
    lines = []
    if path:
        name = ".".join(_key(p) for p in path)
        lines.append(f"[[{name}]]" if array else f"[{name}]")
    nested = []
    for key, value in table.items():
        if isinstance(value, Mapping) or (path == () and _tables(value)):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    blocks.append("\n".join(lines) + "\n" if lines else "")
    for key, value in nested:
        if isinstance(value, Mapping):
            _table(blocks, (*path, key), value, array=False)
        else:
            for item in value:
                _table(blocks, (*path, key), item, array=True)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _string(key)


def _string(text: str) -> str:
    # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped too.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return _string(str(value))
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")
