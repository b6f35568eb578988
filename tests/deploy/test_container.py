"""The container, built and run by a real engine (podman), the way deploy/README.md says.

`deploy/image.sh` (what `make image` runs) builds the repository's Dockerfile; the image then
runs the emulator in one container (the image with the `emulator` extra: the emulator's own
wheel, emulator/, with Google's API types; the product image has neither) and the daemon in
another that joins its network namespace (loopback only: no host port, so the HEALTHCHECK's
fixed 9464 collides with nothing),
with the config mounted read-only and the state on a named volume. Checked: nodes created,
the HEALTHCHECK's own command passes (`podman healthcheck run`), the daemon is not root, its
database is on the volume; `podman stop` ends it with exit 0 within the stop timeout and
deletes nothing; a new container on the same volume resumes (same node incarnations, no
create, in the emulator's request log); `tpucared status` / `events` run inside it; the image's
size, and no tests, caches or git metadata inside it or in its build context (.dockerignore).

podman, runc and mmdebstrap are hard requirements (.ci/run installs them): without them this
fails, never skips. The first build on a machine makes the local base and builds on it (2 to 3
minutes on 2 cores); later ones reuse the base and the engine's layer cache (seconds, or about
a minute when the sources changed).
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from container_support import REPO, RUN, STOP_TIMEOUT, build, podman, podman_names, wait

from tpucared.cli.main import EMULATOR_MISSING

MAX_IMAGE_BYTES = 450_000_000  # 378 MB on the local Debian base (248 MB of it the base)
EMULATOR = "http://127.0.0.1:8471"
NODES = "/v2/projects/ctr-project/locations/us-central2-b/nodes"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _emulator_get(emulator: str, path: str) -> object:
    """GET on the emulator, from inside its container (its port is in that namespace only)."""
    code = (
        "import json,sys,urllib.request;"
        "print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
    )
    out = podman("exec", emulator, "python", "-c", code, EMULATOR + path)
    return json.loads(out.stdout)


def _emulator_delete(emulator: str, path: str) -> None:
    code = (
        "import sys,urllib.request;"
        "urllib.request.urlopen(urllib.request.Request(sys.argv[1], method='DELETE'), timeout=5)"
    )
    podman("exec", emulator, "python", "-c", code, EMULATOR + path)


def _nodes(emulator: str) -> dict[str, dict[str, str]]:
    listed = _emulator_get(emulator, NODES)
    assert isinstance(listed, dict)
    return {n["name"].rsplit("/", 1)[-1]: n for n in listed.get("nodes", [])}


def _requests(emulator: str) -> list[dict[str, object]]:
    log = _emulator_get(emulator, "/_emulator/v1/requests")
    assert isinstance(log, list)
    return log


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    with podman_names("emulator", "first", "second", volumes=("volume",)) as made:
        yield made


def test_the_image_runs_stops_and_resumes_on_its_volume(
    image: str, emulator_image: str, names: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "fleet.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [daemon]
            db = "/var/lib/tpucared/state.db"
            poll_interval = "500ms"
            http = "0.0.0.0:9464"
            owner = "ctr"
            [gcp]
            project = "ctr-project"
            endpoint = "{EMULATOR}"
            credentials = "none"
            [[fleet]]
            name = "ctr"
            zones = ["us-central2-b"]
            accelerator_type = "v4-8"
            runtime_version = "tpu-ubuntu2204-base"
            size = 2
            """
        )
    )
    config.chmod(0o644)
    emulator, volume = names["emulator"], names["volume"]
    # The emulator owns the network namespace (loopback only); the daemons join it.
    podman("run", "-d", "--name", emulator, "--network", "none", *RUN, emulator_image,
           "emulator", "--host", "127.0.0.1", "--port", "8471", "--no-ssh-hosts",
           "--create-seconds", "0.5")  # fmt: skip
    wait("the emulator", lambda: podman("exec", emulator, "python", "-c",
         f"import urllib.request; urllib.request.urlopen('{EMULATOR}{NODES}')",
         check=False).returncode == 0, 60)  # fmt: skip
    podman("volume", "create", volume)

    def daemon(name: str) -> None:
        podman("run", "-d", "--name", name, "--network", f"container:{emulator}", *RUN,
               "-v", f"{volume}:/var/lib/tpucared",
               "-v", f"{config}:/etc/tpucared/config.toml:ro", image)  # fmt: skip

    def ready() -> bool:
        nodes = _nodes(emulator)
        return len(nodes) == 2 and all(n["state"] == "READY" for n in nodes.values())

    def healthy(name: str) -> bool:
        # The image's own HEALTHCHECK command, run by the engine inside the container.
        return podman("healthcheck", "run", name, check=False).returncode == 0

    # A control: the same command fails while nothing serves /healthz in the namespace (the
    # emulator's container has the image's HEALTHCHECK too).
    assert not healthy(emulator)
    first = names["first"]
    daemon(first)
    wait("two READY nodes", ready, 120)
    wait("the HEALTHCHECK to pass", lambda: healthy(first), 60)
    created = _nodes(emulator)
    assert set(created) == {"ctr-0", "ctr-1"}

    # The daemon (PID 1 of the container) runs as the image's tpucared user, not root.
    pid = podman("inspect", "--format", "{{.State.Pid}}", first).stdout.strip()
    uids = next(
        line.split()[1:]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    assert "0" not in uids, uids
    assert "tpucared" in podman("exec", first, "id", "-un").stdout
    # Its database is on the named volume, owned by that user.
    mountpoint = Path(podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume)
                     .stdout.strip())  # fmt: skip
    database = mountpoint / "state.db"
    assert database.is_file()
    assert database.stat().st_size > 0
    assert str(database.stat().st_uid) == uids[0]

    def incarnations(name: str) -> dict[int, tuple[object, ...]]:
        """`tpucared status --json` run in the container: each slot's node incarnation."""
        status = json.loads(podman("exec", name, "tpucared", "status", "--json").stdout)
        (fleet,) = status["fleets"]
        assert fleet["name"] == "ctr"
        return {
            s["slot"]: (
                s["node"]["id"],
                s["node"]["name"],
                s["node"]["cloud_id"],
                s["node"]["phase"],
            )
            for s in fleet["slots"]
        }

    before = incarnations(first)
    assert sorted(str(node[1]) for node in before.values()) == ["ctr-0", "ctr-1"]

    # A stop: SIGTERM, exit 0 well within the stop timeout, and no node deleted.
    started = time.monotonic()
    podman("stop", "--time", str(STOP_TIMEOUT), first, timeout=STOP_TIMEOUT + 30)
    stop_seconds = time.monotonic() - started
    assert stop_seconds < STOP_TIMEOUT, f"podman stop took {stop_seconds:.1f} s"
    assert podman("inspect", "--format", "{{.State.ExitCode}}", first).stdout.strip() == "0"
    logs = podman("logs", first)
    assert '"event": "daemon.stopped"' in logs.stdout + logs.stderr
    assert not [r for r in _requests(emulator) if r["method"] == "DELETE"]
    assert _nodes(emulator) == created

    # A new container on the same volume resumes: the same incarnations, no create.
    _emulator_delete(emulator, "/_emulator/v1/requests")
    second = names["second"]
    daemon(second)

    def listed_a_few_times() -> bool:
        return sum(r["method"] == "GET" for r in _requests(emulator)) >= 4

    wait("the new daemon's ticks", listed_a_few_times, 90)
    wait("the HEALTHCHECK to pass", lambda: healthy(second), 60)
    log = _requests(emulator)
    assert [r for r in log if r["method"] in ("POST", "DELETE")] == [], log
    after = _nodes(emulator)
    assert {k: (n.get("id"), n["createTime"]) for k, n in after.items()} == {
        k: (n.get("id"), n["createTime"]) for k, n in created.items()
    }

    # The CLI inside the container reads the same volume: the same incarnations as before the
    # stop, each requested once, and the second daemon's lease after the first's release.
    assert incarnations(second) == before
    events = podman("exec", second, "tpucared", "events").stdout
    requested = [line.split()[3] for line in events.splitlines() if " node.requested " in line]
    assert sorted(requested) == ["ctr-0", "ctr-1"], events
    assert "leader_released" in events, events
    assert "(epoch 2)" in events, events
    podman("stop", "--time", str(STOP_TIMEOUT), second, timeout=STOP_TIMEOUT + 30)
    assert podman("inspect", "--format", "{{.State.ExitCode}}", second).stdout.strip() == "0"


# Names that must appear nowhere in the image: the project's tests, the caches and venv that
# `make test` leaves in a checkout, git metadata, pip's download cache.
_FORBIDDEN = (".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", "test_house_rules.py")
_WALK = """
import os, sys
forbidden = set(sys.argv[1].split(","))
hits = []
for root in sys.argv[2:]:
    for top, dirs, files in os.walk(root):
        hits += [os.path.join(top, n) for n in dirs + files if n in forbidden]
print("\\n".join(hits))
"""


def test_the_image_is_small_and_holds_no_tests_caches_or_git(image: str) -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    print(f"image size {size / 1e6:.0f} MB")
    assert size < MAX_IMAGE_BYTES, f"{size / 1e6:.0f} MB"
    walk = podman("run", "--rm", "--network", "none", *RUN, "--entrypoint", "python", image,
                  "-c", _WALK, ",".join(_FORBIDDEN), "/opt", "/var/lib/tpucared", "/root",
                  "/tmp", "/etc")  # fmt: skip
    assert walk.stdout.strip() == ""
    listing = podman("run", "--rm", "--network", "none", *RUN, "--entrypoint", "sh", image,
                     "-c", "ls -a /; ls -a /var/lib/tpucared; "
                     "ls /opt/tpucared/lib/python3*/site-packages/tpucared")  # fmt: skip
    assert "wheels" not in listing.stdout.split()
    assert "src" not in listing.stdout.split()
    assert ".cache" not in listing.stdout.split()
    assert "tests" not in listing.stdout.split()
    # The emulator is a distribution of its own, installed only in the emulator's image.
    packages = podman("run", "--rm", "--network", "none", *RUN, "--entrypoint", "sh", image,
                      "-c", "ls /opt/tpucared/lib/python3*/site-packages")  # fmt: skip
    assert not [name for name in packages.stdout.split() if "emulator" in name]


def test_the_build_context_is_what_the_dockerfile_copies(image: str) -> None:
    """The build stage (from the layer cache) holds the copied sources without the bytecode
    caches a checkout that ran the tests has: .dockerignore keeps them out of COPY."""
    stage = f"{image}-build-stage"
    build(stage, "--target", "build")
    try:
        walk = podman("run", "--rm", "--network", "none", *RUN, "--entrypoint", "python",
                      stage, "-c", _WALK, ",".join((*_FORBIDDEN, "__pycache__", "tests")),
                      "/src")  # fmt: skip
        assert walk.stdout.strip() == ""
        top = podman("run", "--rm", "--network", "none", *RUN, "--entrypoint", "ls", stage,
                     "-A", "/src/tpucared")  # fmt: skip
        assert "__init__.py" in top.stdout.split()
    finally:
        podman("untag", stage, check=False)


def test_deploy_readme_builds_and_runs_the_image_as_the_tests_do() -> None:
    text = (REPO / "deploy" / "README.md").read_text()
    section = text[text.index("## In a container") : text.index("## Dashboards and alerts")]
    flat = " ".join(section.replace("\\\n", " ").split())
    assert "make image" in flat
    assert "podman build --isolation chroot --network host --format docker" in flat
    assert f"podman run -d --name tpucared {' '.join(RUN)}" in flat
    script = (REPO / "deploy" / "image.sh").read_text()
    assert "build_args=(--isolation chroot --network host --format docker" in script


def test_the_product_image_says_the_emulator_is_not_installed(image: str) -> None:
    """The daemon's image has no emulator (its own distribution, emulator/, installed only in
    the emulator's image); `tpucared emulator` there says so, and how to install it, in one
    line."""
    out = podman("run", "--rm", "--network", "none", *RUN, image, "emulator", "--no-ssh-hosts",
                 check=False)  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("tpucared")]
    assert lines == [f"tpucared: {EMULATOR_MISSING}"], out.stderr
    assert "Traceback" not in out.stderr
