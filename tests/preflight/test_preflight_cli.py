"""`tpucared check` as a person runs it: the lines, `--json`, and the exit status (0, 1 on
any FAIL, 2 for a config that does not load), against the module's emulator."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from preflight_support import Control, compute_fleet, write_config

from bench import daemon_config
from tpucared_emulator import EmulatorThread

LINE = re.compile(r"(ok|WARN|FAIL) [a-z_]+(\[[^\]]+\])?: .+")


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpucared", "check", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_one_line_per_check_and_exit_0_without_a_fail(tmp_path: Path, emu: EmulatorThread) -> None:
    path = write_config(tmp_path, emu.url, daemon_config.fleet(), compute_fleet())
    out = check("-c", str(path))
    assert out.returncode == 0, out.stderr
    *lines, summary = out.stdout.splitlines()
    assert all(LINE.fullmatch(line) for line in lines), lines
    assert (
        lines[0] == 'ok credentials: none: no token is sent (credentials = "none", for an emulator)'
    )
    assert "WARN quota[tpu7/us-central1]: " in out.stdout  # a WARN does not fail the command
    assert summary == f"{len(lines)} checks: 0 FAIL, 1 WARN"


def test_a_fail_exits_1_with_its_fix(tmp_path: Path, emu: EmulatorThread, control: Control) -> None:
    control(disabled_services=["tpu.googleapis.com"])
    path = write_config(tmp_path, emu.url)
    out = check("-c", str(path))
    assert out.returncode == 1
    assert (
        "FAIL api[test-project/tpu.googleapis.com]: is DISABLED; fix: "
        "gcloud services enable tpu.googleapis.com --project test-project\n"
    ) in out.stdout


def test_json(tmp_path: Path, emu: EmulatorThread, control: Control) -> None:
    control(denied_permissions=["tpu.nodes.delete"])
    path = write_config(tmp_path, emu.url)
    out = check("-c", str(path), "--json")
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert report["ok"] is False
    by_name = {c["name"]: c for c in report["checks"]}
    assert set(by_name["credentials"]) == {"name", "status", "detail", "fix"}
    failed = by_name["permissions[test-project]"]
    assert failed["status"] == "FAIL"
    assert "tpu.nodes.delete" in failed["detail"]
    assert failed["fix"]


def test_a_config_that_does_not_load_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text('[daemon]\ndb = "x.db"\n[gcp]\nproject = "p"\n')
    out = check("-c", str(path))
    assert out.returncode == 2
    assert out.stderr.startswith(f"tpucared: {path}: ")
    assert "Traceback" not in out.stderr
