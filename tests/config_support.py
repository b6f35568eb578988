"""Shared by the config file's tests (test_config_loads.py, test_config_mistakes.py, ...): a
minimal valid config as text (bench/daemon_config.py's `minimal`), builders that add lines to
one of its sections, and loading a text to a Config or to the problem lines it is refused
with."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bench import daemon_config
from tpucared.config import Config, ConfigError, load_config

MINIMAL = daemon_config.render(daemon_config.minimal())


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
