"""The PostgreSQL standby setup in containers: two daemon containers of the image on one
PostgreSQL, against the emulator (its own image, with the `emulator` extra); the leader is
killed and the standby takes over.

deploy/examples/standby/compose.yaml gives each container its own network and reaches the
others by name over a bridge; here everything stays on loopback (the only addresses this
project's tests may reach), so the containers share the host's network: the PostgreSQL is the
tests' own (tests/postgres_support.py), the emulator runs from the emulator image, and each daemon
listens on its own HTTP port (on one network two cannot both take 9464, which is also why
the HEALTHCHECK is not what is checked here: tests/deploy/test_container.py runs it).
Otherwise the daemons' configs are the same: db, owner, lease, fleet and SSH key (made by the
first, on a volume both mount, as in compose.yaml).
"""

from __future__ import annotations

import json
import socket
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from container_support import RUN, STOP_TIMEOUT, podman, podman_names, wait
from sqlalchemy.engine import URL

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the first build: the image fixture

LEASE_SECONDS = 3.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()
    except OSError:
        return 0, ""


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    with podman_names("emulator", "a", "b", volumes=("state",)) as made:
        yield made


def test_two_daemon_containers_on_postgresql_a_standby_takes_over(
    image: str, emulator_image: str, names: dict[str, str], pg_url: URL, tmp_path: Path
) -> None:
    api = f"http://127.0.0.1:{_free_port()}"
    nodes_url = f"{api}/v2/projects/ctr-project/locations/us-central2-b/nodes"
    http = {"a": _free_port(), "b": _free_port()}
    configs = {}
    for who in ("a", "b"):
        configs[who] = tmp_path / f"{who}.toml"
        configs[who].write_text(
            textwrap.dedent(
                f"""
                [daemon]
                db = "{pg_url.render_as_string(hide_password=False)}"
                poll_interval = "500ms"
                lease = "{LEASE_SECONDS:g}s"
                http = "127.0.0.1:{http[who]}"
                owner = "ctr-standby"
                [ssh]
                key = "/var/lib/tpucared/id_ed25519"    # made by the first, shared: a volume
                [gcp]
                project = "ctr-project"
                endpoint = "{api}"
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
        configs[who].chmod(0o644)
    port = api.rsplit(":", 1)[1]
    # The emulator from the image with its extra (Google's types); the daemons from the
    # product image, which has none.
    podman("run", "-d", "--name", names["emulator"], "--network", "host", *RUN, emulator_image,
           "emulator", "--host", "127.0.0.1", "--port", port, "--no-ssh-hosts",
           "--create-seconds", "0.5")  # fmt: skip
    wait("the emulator", lambda: _get(nodes_url)[0] == 200, 60)
    podman("volume", "create", names["state"])

    def daemon(who: str) -> None:
        podman("run", "-d", "--name", names[who], "--hostname", f"tpucared-{who}",
               "--network", "host", *RUN, "-v", f"{names['state']}:/var/lib/tpucared",
               "-v", f"{configs[who]}:/etc/tpucared/config.toml:ro", image)  # fmt: skip

    def nodes() -> dict[str, dict[str, str]]:
        listed = json.loads(_get(nodes_url)[1]).get("nodes", [])
        return {n["name"].rsplit("/", 1)[-1]: n for n in listed}

    def leader_seen_by(who: str) -> str | None:
        out = podman("exec", names[who], "tpucared", "status", "--json", check=False)
        if out.returncode != 0:
            return None
        leader = json.loads(out.stdout)["leader"]
        return f"{leader['host']}/{leader['epoch']}" if leader and leader["held"] else None

    daemon("a")
    wait("two READY nodes", lambda: [n["state"] for n in nodes().values()] == ["READY"] * 2, 120,
         names["a"], names["emulator"])  # fmt: skip
    created = nodes()
    daemon("b")
    wait("the standby's /healthz", lambda: _get(f"http://127.0.0.1:{http['b']}/healthz") == (
        200, "ok: standby"), 60, names["b"])  # fmt: skip
    assert _get(f"http://127.0.0.1:{http['a']}/healthz") == (200, "ok")
    assert leader_seen_by("b") == "tpucared-a/1"

    # The leader dies without releasing its lease (SIGKILL): the standby leads within the
    # lease (+ a third, + a tick), and neither creates nor deletes anything.
    requests_url = f"{api}/_emulator/v1/requests"
    urllib.request.urlopen(urllib.request.Request(requests_url, method="DELETE"), timeout=5)
    killed = time.monotonic()
    podman("kill", names["a"])
    wait("the standby to lead", lambda: leader_seen_by("b") == "tpucared-b/2", 30)
    takeover = time.monotonic() - killed
    # + slack for `podman exec` polls on a loaded machine
    assert takeover < LEASE_SECONDS * 4 / 3 + 10, f"took over after {takeover:.1f} s"
    wait("the new leader's /healthz", lambda: _get(f"http://127.0.0.1:{http['b']}/healthz") == (
        200, "ok"), 30)  # fmt: skip
    log = json.loads(_get(requests_url)[1])
    assert [r for r in log if r["method"] in ("POST", "DELETE")] == [], log
    assert {k: n["createTime"] for k, n in nodes().items()} == {
        k: n["createTime"] for k, n in created.items()
    }
    events = podman("exec", names["b"], "tpucared", "events").stdout
    assert "tpucared-b (pid 1) leads (epoch 2)" in events, events
    podman("stop", "--time", str(STOP_TIMEOUT), names["b"], timeout=STOP_TIMEOUT + 30)
    assert podman("inspect", "--format", "{{.State.ExitCode}}", names["b"]).stdout.strip() == "0"
