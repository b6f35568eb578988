"""The Dockerfile's install path, without a container engine (test_container.py builds the
image itself with podman; this one is quicker to read when only the wheel is wrong).

Does what the image build does: `pip wheel --no-deps .` (and `./emulator`, the emulator's own
distribution), then a fresh venv with only those wheels (and their dependencies) installed,
outside the source tree. The daemon's wheel holds no emulator, and the core is its largest
package (issue 40). From that install:
`tpucared --version`, `tpucared db upgrade` (the migrations must ship inside the wheel), and
a short smoke run: the installed emulator and daemon bring one v4-8 node up to READY, and
SIGTERM stops the daemon with exit 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from bench import daemon_config
from bench.common import free_port
from tpucared.store.migrate import head_revision

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, f"{cmd}: {out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The daemon's wheel and the emulator's, built as the Dockerfile builds them."""
    root = tmp_path_factory.mktemp("wheels")
    for source in (REPO, REPO / "emulator"):
        _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root, source,
             cwd=root)  # fmt: skip
    (daemon,) = root.glob("tpucared-*.whl")
    (emulator,) = root.glob("tpucared_emulator-*.whl")
    return daemon, emulator


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheels: tuple[Path, Path]) -> Path:
    """The bin directory of a fresh venv holding only the built wheels and their dependencies:
    the daemon's with its `emulator` extra, met by the emulator's wheel in the same pip call
    (the smoke run below runs the installed emulator)."""
    root = tmp_path_factory.mktemp("wheel")
    daemon, emulator = wheels
    _run(sys.executable, "-m", "venv", root / "venv", cwd=root)
    _run(root / "venv" / "bin" / "pip", "install", "-q", f"{daemon}[emulator]", emulator,
         cwd=root)  # fmt: skip
    return root / "venv" / "bin"


def _python_lines(wheel: Path) -> Counter[str]:
    """Lines of Python in a wheel, by package below the import package (`tpucared/core/...`
    counts for "core"; the import package's own modules for "")."""
    lines: Counter[str] = Counter()
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            parts = name.split("/")
            if name.endswith(".py"):
                lines[parts[1] if len(parts) > 2 else ""] += archive.read(name).count(b"\n")
    return lines


def test_the_daemons_wheel_holds_no_emulator_and_core_is_its_largest_package(
    wheels: tuple[Path, Path],
) -> None:
    daemon, emulator = wheels
    with zipfile.ZipFile(daemon) as archive:
        names = archive.namelist()
    assert not [name for name in names if "emulator" in name]  # no module, data file, script
    lines = _python_lines(daemon)
    largest = max((package for package in lines if package), key=lines.__getitem__)
    assert largest == "core", lines.most_common(3)
    # What left the daemon's wheel: the emulator's 9k+ lines, all in its own wheel.
    assert sum(_python_lines(emulator).values()) > 9000


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPUCARED_", "VIRTUAL_ENV"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def test_the_installed_wheel_runs_and_carries_its_migrations(
    installed: Path, tmp_path: Path
) -> None:
    from tpucared import __version__

    assert _run(installed / "tpucared", "--version", cwd=tmp_path).strip() == (
        f"tpucared {__version__}"
    )
    # Imported from the install, not from the source tree.
    where = _run(installed / "python", "-c", "import tpucared; print(tpucared.__file__)",
                 cwd=tmp_path)  # fmt: skip
    assert "site-packages" in where
    assert str(REPO) not in where
    out = _run(installed / "tpucared", "db", "upgrade", "--db", tmp_path / "x.db", cwd=tmp_path)
    # Every migration of the source tree shipped: the install reaches the same head.
    assert f"at revision {head_revision()}" in out


def test_a_smoke_run_of_the_installed_emulator_and_daemon(installed: Path, tmp_path: Path) -> None:
    api_port = free_port()
    config = daemon_config.write(
        tmp_path / "fleet.toml",
        daemon_config.against_emulator(
            f"http://127.0.0.1:{api_port}",
            daemon_config.fleet("smoke"),
            project="smoke-project",
            owner="smoke",
            poll="500ms",
            ssh=None,
        ),
    )
    emulator = subprocess.Popen(
        [installed / "tpucared", "emulator", "--port", str(api_port), "--no-ssh-hosts",
         "--create-seconds", "0.5"],
        cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    daemon: subprocess.Popen[bytes] | None = None
    try:
        daemon = subprocess.Popen(
            [installed / "tpucared", "run", "-c", config],
            cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        url = f"http://127.0.0.1:{api_port}/v2/projects/smoke-project/locations/us-central2-b/nodes"
        deadline = time.monotonic() + 90
        state = None
        while time.monotonic() < deadline:
            assert daemon.poll() is None, "the installed daemon exited"
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    nodes = json.load(response).get("nodes", [])
                state = nodes[0]["state"] if nodes else None
            except OSError:
                state = None
            if state == "READY":
                break
            time.sleep(0.3)
        assert state == "READY"
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
        status = _run(installed / "tpucared", "status", "--json", "-c", config, cwd=tmp_path)
        (fleet,) = json.loads(status)["fleets"]
        assert fleet["name"] == "smoke"
    finally:
        for proc in (daemon, emulator):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
