"""The `tpucared` entry point: version, usage errors, and option passthrough to the emulator."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

from bench.common import free_port
from tpucared import __version__

TPUCARED = [sys.executable, "-m", "tpucared"]


def test_version() -> None:
    out = subprocess.run([*TPUCARED, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"tpucared {__version__}"


def test_unknown_arguments_are_a_usage_error() -> None:
    out = subprocess.run([*TPUCARED, "emulator-typo"], capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert "invalid choice: 'emulator-typo'" in out.stderr


# The daemon's install without the emulator (its own distribution, emulator/): a None in
# sys.modules makes `import tpucared_emulator` fail as it does where it is not installed.
WITHOUT_EMULATOR = (
    "import sys; sys.modules['tpucared_emulator'] = None; "
    "from tpucared.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


def test_emulator_and_demo_say_how_to_install_the_emulator_where_it_is_missing() -> None:
    for command in (["emulator", "--port", "0"], ["demo", "--duration", "1"]):
        out = subprocess.run(
            [sys.executable, "-c", WITHOUT_EMULATOR, *command],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert out.returncode == 2, out.stderr
        assert "the emulator is not installed" in out.stderr
        assert "pip install ./emulator" in out.stderr
        assert "Traceback" not in out.stderr


def test_emulator_options_reach_the_emulator_and_sigterm_stops_it() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*TPUCARED, "--log-format", "json", "emulator", "--port", str(port), "--no-ssh-hosts"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/v2/projects/p/locations/us-central2-b/nodes"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    assert json.load(resp) == {}
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "emulator did not start"
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    events = [json.loads(line)["event"] for line in stdout.splitlines() if line.startswith("{")]
    assert events[0] == "emulator.started"
    assert events[-1] == "emulator.stopped"


def test_a_missing_config_names_both_ways_to_give_it() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TPUCARED_CONFIG"}
    for argv in (["logs", "f/0"], ["exec", "f", "--", "true"], ["cp", "x", "f:/tmp/x"], ["run"]):
        out = subprocess.run([*TPUCARED, *argv], capture_output=True, text=True, env=env)
        assert out.returncode == 2, argv
        assert out.stderr == "tpucared: no config file: pass -c FILE or set TPUCARED_CONFIG\n"
