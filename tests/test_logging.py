"""structlog configuration: JSON lines off a TTY, stdlib loggers routed, secrets redacted."""

from __future__ import annotations

import io
import json
import logging

import structlog

from tpucared.logsetup import configure_logging, register_secret


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_when_not_a_tty_with_bound_context() -> None:
    stream = io.StringIO()
    configure_logging(json=None, stream=stream)  # StringIO is not a TTY: JSON
    structlog.contextvars.bind_contextvars(fleet="sweep", slot=2)
    try:
        structlog.get_logger("tpucared.test").info("node_ready", node="sweep-2")
    finally:
        structlog.contextvars.clear_contextvars()
    (line,) = _lines(stream)
    assert line["event"] == "node_ready"
    assert line["fleet"] == "sweep"
    assert line["slot"] == 2
    assert line["level"] == "info"
    assert str(line["timestamp"]).endswith("Z")


def test_stdlib_loggers_render_through_the_same_pipeline() -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    logging.getLogger("aiohttp.client").warning("connection reset by %s", "peer")
    (line,) = _lines(stream)
    assert line["event"] == "connection reset by peer"
    assert line["logger"] == "aiohttp.client"
    assert line["level"] == "warning"


def test_registered_secret_values_are_redacted_everywhere() -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    secret = "wandb-0123456789abcdef"
    register_secret(secret)
    log = structlog.get_logger("tpucared.test")
    log.info(f"running with {secret}", env={"WANDB_API_KEY": secret}, args=["x", secret])
    logging.getLogger("asyncssh").error("auth failed for %s", secret)
    output = stream.getvalue()
    assert secret not in output
    assert output.count("[REDACTED]") == 4
