"""`tpucared run` runs the same checks at start, in the background, and logs each FAIL
(`check.failed`) and WARN (`check.warned`) without refusing to start: its loop ticks on.
The one daemon run of the preflight's tests, with `daemon.start_checks` at its default (on;
bench/daemon_config.py turns it off for the other daemon tests, which count requests)."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from preflight_support import Control, compute_fleet, load
from structlog.testing import capture_logs

from bench import daemon_config
from tpucared.runtime.daemon import run_daemon
from tpucared.runtime.reconciler import Tick
from tpucared_emulator import EmulatorThread


async def test_the_daemon_logs_failed_checks_and_keeps_running(
    tmp_path: Path, emu: EmulatorThread, control: Control
) -> None:
    control(denied_permissions=["tpu.nodes.create"])
    config = load(
        tmp_path, emu.url, daemon_config.fleet(), compute_fleet(), daemon={"start_checks": None}
    )
    assert config.daemon.start_checks  # the default
    logs: list[MutableMapping[str, Any]]

    def checked(tick: Tick) -> bool:
        """The checks are done and the loop has ticked (in either order: with two test
        processes the checks once finished before the first reconcile tick was logged)."""
        events = {e["event"] for e in logs}
        return tick.number >= 100 or {"check.finished", "reconcile.tick"} <= events

    with capture_logs() as logs:
        code = await run_daemon(config, until=checked, serve_http=False, handle_signals=False)
    assert code == 0
    failed = [e for e in logs if e["event"] == "check.failed"]
    assert [e["check"] for e in failed] == ["permissions[test-project]"]
    assert "tpu.nodes.create" in failed[0]["detail"]
    assert failed[0]["fix"]
    warned = [e["check"] for e in logs if e["event"] == "check.warned"]
    assert warned == ["quota[tpu7/us-central1]"]
    finished = next(e for e in logs if e["event"] == "check.finished")
    assert (finished["failed"], finished["warned"]) == (1, 1)
    # A FAIL and a WARN at start, and the loop ticked on regardless.
    assert any(e["event"] == "reconcile.tick" for e in logs)


def test_the_test_builder_turns_them_off(tmp_path: Path, emu: EmulatorThread) -> None:
    """Every other daemon test runs without them (bench/daemon_config.py)."""
    assert not load(tmp_path, emu.url, daemon_config.fleet()).daemon.start_checks
