"""What the preflight's tests share besides fixtures (conftest.py): the raw-HTTP call to the
emulator's control API, a config against the emulator written and loaded, and a `compute`
fleet of one TPU7x VM."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import daemon_config
from tpucared.config import Config, load_config
from tpucared.preflight import CheckResult

Control = Callable[..., None]
RunCheck = Callable[..., dict[str, CheckResult]]


def emulator_call(url: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"null")


def write_config(tmp_path: Path, url: str, *fleets: Mapping[str, Any], **tables: Any) -> Path:
    config = daemon_config.against_emulator(url, *(fleets or (daemon_config.fleet(),)), **tables)
    return daemon_config.write(tmp_path / "fleet.toml", config)


def load(tmp_path: Path, url: str, *fleets: Mapping[str, Any], **tables: Any) -> Config:
    return load_config(write_config(tmp_path, url, *fleets, **tables))


def compute_fleet(name: str = "tpu7", **keys: Any) -> dict[str, Any]:
    base = {
        "api": "compute",
        "machine_type": "tpu7x-standard-4t",
        "zones": ["us-central1-c"],
        "accelerator_type": None,
        "runtime_version": None,
    }
    return daemon_config.fleet(name, **{**base, **keys})
