"""The demo's config: deploy/examples/emulator.toml, pointed at the demo's own emulator and files.

The example file stays the documented one (`tpucared run -c deploy/examples/emulator.toml`
against `tpucared emulator`); the demo reads it and replaces only what must differ in one
process on a shared machine: the API endpoint and the workers' SSH port (free ports picked
at start), the database and the HTTP address (the demo's temporary directory, a free port),
and every workload's CHECKPOINT_DIR (the demo's "bucket"). The file's own path anchors its
relative paths, so `workload.files` still finds toy_train.py next to it.

The examples live in the source tree, not in the installed package: the demo runs from a
checkout (`make demo`), which is where a person trying tpucared out has it.
"""

from __future__ import annotations

import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tpucared
from tpucared.config import Config, ConfigError, parse_config

EXAMPLES = Path(tpucared.__file__).resolve().parents[1] / "deploy" / "examples"
EXAMPLE = EXAMPLES / "emulator.toml"
CHECKPOINT_ENV = "CHECKPOINT_DIR"


class ExampleMissing(Exception):
    """The example config is not where a source checkout has it."""


@dataclass(frozen=True)
class DemoPlaces:
    """Where the demo's emulator listens and its files go."""

    endpoint: str  # the emulator's API, e.g. "http://127.0.0.1:40123"
    ssh_port: int  # every simulated worker's SSH port (on its own 127.x.y.z address)
    db: Path
    http_port: int
    checkpoints: Path


def free_port() -> int:
    """A port free on every address: the workers listen on 127.x.y.z, not only 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])


def load_example(path: Path = EXAMPLE) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExampleMissing(
            f"{path} not found: `tpucared demo` runs from a source checkout of tpucared "
            "(git clone ..., then `make demo`)"
        ) from None


def demo_config(places: DemoPlaces, path: Path = EXAMPLE) -> Config:
    """The example config with the demo's endpoint, ports, database and checkpoints."""
    data = retarget(load_example(path), places)
    try:
        return parse_config(data, path)
    except ConfigError as exc:
        raise ExampleMissing(f"{path} does not load: {exc}") from None


def retarget(data: Mapping[str, Any], places: DemoPlaces) -> dict[str, Any]:
    """A copy of the parsed example TOML with the demo's places put in."""
    out = {key: value for key, value in data.items()}
    out["daemon"] = {
        **data.get("daemon", {}),
        "db": str(places.db),
        "http": f"127.0.0.1:{places.http_port}",
    }
    out["gcp"] = {**data.get("gcp", {}), "endpoint": places.endpoint, "credentials": "none"}
    out["ssh"] = {**data.get("ssh", {}), "port": places.ssh_port}
    fleets = []
    for fleet in data.get("fleet", []):
        fleet = dict(fleet)
        workload = fleet.get("workload")
        if isinstance(workload, Mapping) and CHECKPOINT_ENV in workload.get("env", {}):
            env = {**workload["env"], CHECKPOINT_ENV: str(places.checkpoints)}
            fleet["workload"] = {**workload, "env": env}
        fleets.append(fleet)
    out["fleet"] = fleets
    return out
