"""Remote scripts that prepare a worker once per node incarnation: files, secrets, code, setup.

Owns `write_file_script` (how any file, the secrets file included, reaches a worker: content
on stdin, never on a command line), `secrets_file_contents`, and `setup_script` (clone or
update the repository, then run the user's setup command). Pure functions; `upload.py` and the
runtime send them with the fan-out.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpucared.ssh.shell import CHOOSE_SHELL, assignment, export_lines, path_expr, quote


def write_file_script(remote_path: str, *, mode: int, size: int) -> str:
    """A script that writes its stdin to `remote_path` atomically with `mode`.

    Created under umask 077 (a secret is never readable by others, not even between write and
    chmod), size-checked against `size` so a connection dropped mid-transfer cannot install a
    truncated file, then renamed into place. Missing parent directories are created 0700.
    Prints `TPUCARED_WRITE state=ok bytes=N`.
    """
    if not 0 <= mode <= 0o7777:
        raise ValueError(f"invalid file mode {mode:o}")
    return f"""\
set -eu
umask 077
f={path_expr(remote_path)}
d=$(dirname -- "$f")
mkdir -p -- "$d"
t="$d/.$(basename -- "$f").tpucared.$$"
trap 'rm -f -- "$t"' EXIT
cat > "$t"
n=$(wc -c < "$t")
if [ "$((n))" -ne {int(size)} ]; then
  echo "received $((n)) of {int(size)} bytes for $f" >&2
  exit 1
fi
chmod {mode:04o} -- "$t"
mv -f -- "$t" "$f"
trap - EXIT
echo "TPUCARED_WRITE state=ok bytes=$((n))"
"""


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
    """A script that brings `workdir` to `ref` of `repository` and runs `setup_cmd` there.

    First run: `git clone` into a temporary name, renamed into place only when complete (an
    interrupted clone never looks like a checkout). Later runs: fetch, then check out `ref`
    detached, resetting tracked files; untracked files (data, checkpoints) are kept. `ref` may
    be a branch, a tag or a commit; none means the remote's default branch. Without a
    repository, `workdir` is just created. Safe to run again after a crash. The runtime runs it
    once per node incarnation, in the foreground for short setups or through
    `scripts.launch_script` (detached, probed) for long ones. Prints
    `TPUCARED_SETUP state=done commit=<sha or none>`.
    """
    exports = "\n".join(export_lines(env or {}))
    checkout = ""
    if repository:
        checkout = f"""\
command -v git >/dev/null 2>&1 || {{ echo "git is not installed on this worker" >&2; exit 1; }}
repo={quote(repository)}
ref={quote(ref or "")}
if [ -d "$wd/.git" ]; then
  git -C "$wd" remote set-url origin "$repo"
  git -C "$wd" fetch --quiet --force --tags --prune origin '+refs/heads/*:refs/remotes/origin/*'
else
  if [ -e "$wd" ]; then echo "$wd exists and is not a git checkout" >&2; exit 1; fi
  mkdir -p -- "$(dirname -- "$wd")"
  rm -rf -- "$wd.tpucared-clone"
  git clone --quiet --no-checkout -- "$repo" "$wd.tpucared-clone"
  mv -- "$wd.tpucared-clone" "$wd"
fi
cd -- "$wd"
# Remote branches first: a local branch of the same name (made by clone) may be stale.
if [ -z "$ref" ]; then
  target=refs/remotes/origin/HEAD
  git rev-parse -q --verify "$target" >/dev/null || git remote set-head origin --auto >/dev/null
elif git rev-parse -q --verify "refs/remotes/origin/$ref^{{commit}}" >/dev/null; then
  target="refs/remotes/origin/$ref"
elif git rev-parse -q --verify "$ref^{{commit}}" >/dev/null; then
  target=$ref
else
  git fetch --quiet --force origin "$ref"
  target=FETCH_HEAD
fi
git checkout --quiet --force --detach "$target"
commit=$(git rev-parse HEAD)
"""
    else:
        checkout = 'mkdir -p -- "$wd"\ncd -- "$wd"\ncommit=none\n'
    run_setup = f'"$tpucared_shell" -c {quote(setup_cmd)}\n' if setup_cmd else ""
    return f"""\
set -eu
export GIT_TERMINAL_PROMPT=0
{exports}
{CHOOSE_SHELL}
wd={path_expr(workdir)}
{checkout}{run_setup}echo "TPUCARED_SETUP state=done commit=$commit"
"""
