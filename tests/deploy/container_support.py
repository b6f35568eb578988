"""What the container tests share: podman as deploy/README.md runs it, the image build
(deploy/image.sh, what `make image` runs), and names for containers that are removed after.

podman, runc and mmdebstrap are hard requirements (.ci/run installs them): without them the
container tests fail, never skip.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE_SH = REPO / "deploy" / "image.sh"
IMAGE = "localhost/tpucared:test"
EMULATOR_IMAGE = "localhost/tpucared:test-emulator"  # with the `emulator` extra (conftest.py)
PODMAN = "podman"
# Test processes (pytest-xdist workers) build the images one at a time: the second finds them in
# podman's cache instead of building the same tag beside the first.
BUILD_LOCK = Path(tempfile.gettempdir()) / "tpucared-test-image-build.lock"
# As deploy/README.md runs it: runc (crun refuses on hosts like CI's), and rlimits at most the
# host's (raising them is not permitted there).
RUN = ["--runtime", "runc", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
STOP_TIMEOUT = 10  # podman's and docker's default: past it the daemon is SIGKILLed (exit 137)


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [PODMAN, *args], capture_output=True, text=True, check=False, timeout=timeout
    )
    if check:
        assert out.returncode == 0, f"podman {args}: {out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out


def build(tag: str, *options: str) -> float:
    """deploy/image.sh TAG [podman build options]; the seconds it took. The pip whose
    configuration it passes into the build is this interpreter's."""
    missing = [tool for tool in ("podman", "runc", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"not installed: {' '.join(missing)} (apt-get install podman runc mmdebstrap)")
    started = time.monotonic()
    with BUILD_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = subprocess.run(
            ["bash", str(IMAGE_SH), tag, *options], cwd=REPO,
            env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True,
            timeout=800, check=False,
        )  # fmt: skip
    assert out.returncode == 0, f"deploy/image.sh: {out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return time.monotonic() - started


def wait(what: str, check: Callable[[], bool], deadline_s: float, *logs_of: str) -> None:
    """Poll `check` until it holds; past the deadline, fail with the named containers' logs."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    logs = []
    for name in logs_of:
        out = podman("logs", "--tail", "30", name, check=False)
        logs.append(f"--- {name}:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    raise AssertionError("\n".join([f"timed out waiting for {what}", *logs]))


@contextmanager
def podman_names(*containers: str, volumes: tuple[str, ...] = ()) -> Iterator[dict[str, str]]:
    """Unique names for one test's containers and volumes; all removed afterwards."""
    prefix = f"tpucared-test-{os.getpid()}-{secrets.token_hex(3)}"
    made = {k: f"{prefix}-{k}" for k in (*containers, *volumes)}
    try:
        yield made
    finally:
        for key in reversed(containers):
            # --volumes: the anonymous volume of the image's VOLUME, when no named one was mounted
            podman("rm", "--force", "--volumes", "--time", "0", made[key], check=False)
        for key in volumes:
            podman("volume", "rm", "--force", made[key], check=False)
