"""Which database a read-only command (`status`, `events`) opens.

In order: `--db`; else `daemon.db` of the config (`-c FILE` or $TPUCARED_CONFIG); else
$TPUCARED_DB; else the packaged default, where the systemd unit keeps its state. A config
file is only read when given, so these commands work on a machine without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tpucared.store.engine import database_url, sqlite_path

CONFIG_ENV = "TPUCARED_CONFIG"  # tpucared.config.ENV_VAR, without importing pydantic
DB_ENV = "TPUCARED_DB"
DEFAULT_DB = "/var/lib/tpucared/state.db"


def resolve_db(db: str | None, config: str | None, environ: Mapping[str, str]) -> str:
    """The `daemon.db` setting to open (a path or a URL). `ValueError` for a bad config file
    (every problem, one per line) or an unusable setting."""
    if db:
        return db
    config = config or environ.get(CONFIG_ENV)
    if config:
        # Imported here: validating a config costs a few hundred ms of imports (pydantic).
        from tpucared.config import ConfigError, load_config

        try:
            setting = load_config(config).daemon.db
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
    else:
        setting = environ.get(DB_ENV) or DEFAULT_DB
    database_url(setting)  # validate now, so the error names the setting, not SQLAlchemy
    return setting


def missing_file(setting: str) -> Path | None:
    """The SQLite file the setting names if it does not exist (else None): a read-only open
    must not create it, and "unable to open database file" would not say which file."""
    path = sqlite_path(database_url(setting))
    return path if path is not None and not path.exists() else None
