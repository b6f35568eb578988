"""Logging for every tpucared process, configured once at start-up by the CLI.

structlog renders one event per line: JSON on stdout when stdout is not a TTY (systemd's
journal, docker logs, files), a readable console format on a TTY. The stdlib loggers of
aiohttp, asyncssh, sqlalchemy and alembic are routed through the same processors with
`ProcessorFormatter`, so their records look like ours. Context (fleet, slot, node, worker) is
bound with `structlog.contextvars`. The last processor before rendering redacts every secret
value registered with `register_secret`, wherever it appears in the event.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

REDACTED = "[REDACTED]"

# Values (not names) of secrets the daemon has read; redacted from every log event.
_secret_values: set[str] = set()

# Third-party loggers that are chatty at INFO: kept at WARNING unless debug is asked for.
_NOISY_LOGGERS = ("asyncssh", "aiohttp.access", "sqlalchemy.engine", "alembic")


def register_secret(value: str) -> None:
    """Redact `value` from all log output from now on. Short values are ignored: redacting
    "1" or "" would mangle every number in the logs without protecting anything."""
    if len(value) >= 4:
        _secret_values.add(value)


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        for secret in _secret_values:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redact_value(v) for v in value)
    return value


def redact(text: str) -> str:
    """`text` with every registered secret value replaced: for what leaves the process other
    than through the log (an event message, an error written to the database)."""
    return str(_redact_value(text))


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: replace registered secret values anywhere in the event."""
    if not _secret_values:
        return event_dict
    for key, value in list(event_dict.items()):
        event_dict[key] = _redact_value(value)
    return event_dict


def configure_logging(
    *, level: str = "info", json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog and the stdlib root logger. `json=None` picks by TTY."""
    stream = stream if stream is not None else sys.stdout
    if json is None:
        json = not stream.isatty()

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Any
    if json:
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())

    structlog.configure(
        processors=[
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            redact_secrets,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric if isinstance(numeric, int) else logging.INFO)
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
