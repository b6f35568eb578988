"""The config file a command reads: `-c FILE` or `$TPUCARED_CONFIG`, loaded or refused.

Every command that needs the config loads it here; a config problem becomes a `UsageError`
(one line per problem naming the file and the key; exit status 2).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tpucared.errors import UsageError

if TYPE_CHECKING:
    from tpucared.config import Config

DEFAULT_DB = "/var/lib/tpucared/state.db"


def load(args: argparse.Namespace) -> Config:
    from tpucared.config import ConfigError, load_config, resolve_config_path

    try:
        return load_config(resolve_config_path(args.config))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
