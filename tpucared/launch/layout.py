"""Where a slot's workload lives on its workers, and the command each attempt runs.

Owns the worker-side layout (see core/workload/actions.py) and `workload_command`, the shell
text that `scripts.launch_script` runs detached in an attempt's run directory. Pure string
building; the SSH launcher (`launcher.py`) and the CLI commands (`by_hand.py`)
share it so they agree on every path.

Setup runs inside the first attempt on each disk, guarded by a marker file named by a digest
of the setup (repository, ref, command): it runs once per node incarnation, again only if the
setup changes, and never on a relaunch. Running it in the attempt rather than as a separate
step means a long `pip install` blocks nothing, its output lands in the attempt's log
(`tpucared logs`), a failed setup fails the attempt (exit code recorded per worker, crash
budget and backoff apply), and a hung one is caught by the hang timeout.
"""

from __future__ import annotations

import hashlib
import json
import re
from shlex import quote

from tpucared.core.model.specs import WorkloadSpec
from tpucared.launch.provision import setup_script
from tpucared.ssh.shell import path_expr

RUNS = "~/.tpucared/runs"
_SETUP_MARKERS = "~/.tpucared"
_REPO_NAME = re.compile(r"[^A-Za-z0-9._-]")


def slot_dir(run_id: str) -> str:
    return f"{RUNS}/{run_id}"


def attempt_dir(run_id: str, attempt: int | None) -> str:
    """The run directory of an attempt; `None` names one that never exists (attempt numbers
    start at 1), which a probe reports as never started: how idle slots are probed."""
    return f"{slot_dir(run_id)}/attempt-{attempt or 0}"


def secrets_path(run_id: str) -> str:
    return f"{slot_dir(run_id)}/secrets.env"


def workdir(spec: WorkloadSpec) -> str:
    """Where the workload runs: the repository's checkout (`~/<name>`, as `git clone` names
    it), or the home directory."""
    if not spec.repository:
        return "~"
    name = spec.repository.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    name = _REPO_NAME.sub("-", name.removesuffix(".git")).strip(".-")
    return f"~/{name or 'repo'}"


def needs_setup(spec: WorkloadSpec) -> bool:
    return bool(spec.repository or spec.setup)


def setup_marker(spec: WorkloadSpec) -> str:
    blob = json.dumps([spec.repository, spec.ref, spec.setup, workdir(spec)])
    return f"{_SETUP_MARKERS}/setup-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.done"


def workload_command(spec: WorkloadSpec) -> str:
    """The attempt's command: the setup unless this disk has done it, then `run` in the
    workdir. The environment (TPUCARED_*, `env`, the secrets) is already set by the wrapper."""
    lines = []
    if needs_setup(spec):
        script = setup_script(spec.repository, spec.ref, spec.setup, workdir(spec))
        what = spec.repository or "setup"
        lines += [
            f"marker={path_expr(setup_marker(spec))}",
            'if [ ! -e "$marker" ]; then',
            f"  echo {quote(f'[tpucared] setup: {what}')}",
            f"  sh -c {quote(script)} || {{",
            "    rc=$?",
            '    echo "[tpucared] setup failed: exit $rc"',
            '    exit "$rc"',
            "  }",
            '  mkdir -p -- "${marker%/*}" && : > "$marker"',
            "fi",
        ]
    lines += [f"cd {path_expr(workdir(spec))} || exit 1", spec.run]
    return "\n".join(lines) + "\n"
