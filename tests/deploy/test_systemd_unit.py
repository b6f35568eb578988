"""deploy/tpucared.service passes `systemd-analyze verify` and stays hardened.

verify insists that ExecStart's binary exists, and /opt/tpucared (where deploy/README.md
installs the venv) does not exist on a test machine: the copy under test points ExecStart at
this environment's own `tpucared` console script and is otherwise byte-identical.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "tpucared.service"


def _systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze is missing: install Debian's systemd package (.ci/run does)"
    return tool


def _unit_with_local_binary(tmp_path: Path) -> Path:
    binary = Path(sys.executable).with_name("tpucared")
    assert binary.exists(), f"{binary} missing: install the package (pip install -e .)"
    text = UNIT.read_text()
    assert "ExecStart=/opt/tpucared/bin/tpucared run" in text
    copy = tmp_path / "tpucared.service"
    copy.write_text(text.replace("/opt/tpucared/bin/tpucared", str(binary)))
    return copy


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    unit = _unit_with_local_binary(tmp_path)
    result = subprocess.run(
        [_systemd_analyze(), "verify", str(unit)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


def test_unit_exposure_level_is_low(tmp_path: Path) -> None:
    unit = _unit_with_local_binary(tmp_path)
    result = subprocess.run(
        [_systemd_analyze(), "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 2.5, result.stdout


def test_unit_keeps_the_contracted_settings() -> None:
    text = UNIT.read_text()
    for setting in (
        "User=tpucared",
        "StateDirectory=tpucared",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "Restart=on-failure",
        # The daemon says READY=1, WATCHDOG=1 per tick, STATUS=, STOPPING=1 (sdnotify.py).
        "Type=notify",
        "NotifyAccess=main",
    ):
        assert setting in text


def test_the_watchdog_outlasts_the_longest_poll_and_a_slow_tick() -> None:
    """Pings come once per tick, at most poll_interval (10m at most) + one tick apart."""
    match = re.search(r"^WatchdogSec=(\d+)min$", UNIT.read_text(), re.MULTILINE)
    assert match, "WatchdogSec= in minutes"
    assert int(match.group(1)) >= 10 + 5
