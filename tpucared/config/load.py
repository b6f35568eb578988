"""Finding, reading and validating a config file: the package's entry points.

`load_config(path)` reads the file as UTF-8 TOML; `parse_config` validates it in two
passes: the shape (`schema.py`; its problems worded by `messages.py`), then the rules
across keys (`build.py`), run only when the shape is right. Every problem becomes one line
`FILE: KEY: what is expected`; all lines together are raised as one `ConfigError`.
`resolve_config_path` picks the file the CLI should use.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tpucared.config.build import build_config
from tpucared.config.messages import shape_problems
from tpucared.config.problems import Problems
from tpucared.config.schema import ConfigFile
from tpucared.config.values import Config

ENV_VAR = "TPUCARED_CONFIG"


class ConfigError(Exception):
    """Everything wrong with a config file, one problem per line."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


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
    """Read, parse and validate the config file at `path`; `ConfigError` if anything is off."""
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
        raw = ConfigFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([f"{file}: {line}" for line in shape_problems(exc, data)]) from None
    problems = Problems()
    config = build_config(raw, file, problems)
    if problems:
        raise ConfigError([f"{file}: {key}: {msg}" for key, msg in problems.items])
    assert config is not None
    return config
