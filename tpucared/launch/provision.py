"""Preparing a worker for the workload: the secrets file, and the code and its setup.

Owns `secrets_file_contents` (what the secrets file on a worker holds; it travels as any file
does, through `tpucared.ssh.upload`: content on stdin, never on a command line) and
`setup_script` (sh/setup.sh: clone or update the repository, then run the user's setup
command), which `layout.workload_command` runs inside an attempt. The functions check and
quote the values and hand them to the scripts as positional parameters (`shfiles.script`);
they are pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpucared.launch import shfiles
from tpucared.ssh.shell import assignment, env_words, path_expr, quote


def secrets_file_contents(secrets: Mapping[str, str]) -> bytes:
    """The worker's secrets file: one shell-quoted `NAME='value'` line per secret.

    The run wrapper sources it with `set -a`, so the values reach the workload's environment
    without passing through any command line. Upload it with mode 0600 (`upload.FileUpload`).
    """
    lines = ["# Written by tpucared; sourced by the run wrapper. Do not edit."]
    lines += [assignment(name, value) for name, value in sorted(secrets.items())]
    return ("\n".join(lines) + "\n").encode()


def setup_script(
    repository: str | None,
    ref: str | None,
    setup_cmd: str | None,
    workdir: str,
    *,
    env: Mapping[str, str] | None = None,
) -> str:
    """A script (sh/setup.sh) that brings `workdir` to `ref` of `repository` and runs
    `setup_cmd` there, with `env` exported.

    First run: `git clone` into a temporary name, renamed into place only when complete (an
    interrupted clone never looks like a checkout). Later runs: fetch, then check out `ref`
    detached, resetting tracked files; untracked files (data, checkpoints) are kept. `ref` may
    be a branch, a tag or a commit; none means the remote's default branch. Without a
    repository, `workdir` is just created. Safe to run again after a crash. The runtime runs it
    once per node incarnation, in the foreground for short setups or through
    `scripts.launch_script` (detached, probed) for long ones. Prints
    `TPUCARED_SETUP state=done commit=<sha or none>`.
    """
    args = [quote(repository or ""), quote(ref or ""), quote(setup_cmd or ""), path_expr(workdir)]
    return shfiles.script("setup", [*args, *env_words(env or {})])
