"""Remote scripts that run, watch and clean up the workload on a worker, and their parsers.

Owns the detached run protocol. A run lives in one run directory on the worker:

    run.sh      the generated wrapper (what was run; no secret values in it)
    pid         pid of the wrapper = the run's process group and session id
    ident       "<boot id> <process start time>" of the wrapper, so a reused pid or a rebooted
                machine is never mistaken for the run
    log         stdout + stderr of the workload (appended), plus "[tpucared]" start/exit lines
    exit_code   written atomically (tmp + mv) when the workload exits

`launch_script` starts the workload detached so it outlives the SSH connection, `probe_script`
says running / exited <code> / gone with the log size (for hang detection), `cleanup_script`
frees the TPU before a relaunch. Each script prints one `TPUCARED_<NAME> key=value ...` line
that the `parse_*` functions read. The functions are pure; the runtime sends the scripts with
`fanout.run_on_all(targets, sh_command(script))`.

A run directory holds exactly one run: launching into one whose run has exited reports that
exit instead of starting again, so a relaunch after a daemon crash is idempotent. Use a fresh
run directory per attempt (e.g. `~/.tpucared/runs/<run id>/attempt-<n>`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from tpucared.ssh.shell import (
    CHOOSE_SHELL,
    ScriptOutputError,
    export_lines,
    int_field,
    parse_marker,
    path_expr,
    quote,
)

DEFAULT_DEVICE_PATTERNS: tuple[str, ...] = ("/dev/accel*", "/dev/vfio/*")
DEFAULT_LIBTPU_LOCKFILE = "/tmp/libtpu_lockfile"

# Shell functions shared by the scripts. They read /proc with the `read` builtin only, so
# scanning every process costs no fork.
#   proc_stat FILE: sets _st (state), _pg (process group), _start (start time in ticks).
#   boot_id: sets _boot.
#   run_alive: the run's wrapper is alive (not a zombie: an orphan is only reaped if PID 1 does
#     it, which is not true in every container), same boot, same start time. Sets _pid; sets
#     _why to no-run / died / rebooted when it returns false.
#   group_alive PGID: some non-zombie process is in that process group.
_FUNCTIONS = r"""
proc_stat() {
  _st= _pg= _start= _line=
  { read -r _line < "$1"; } 2>/dev/null || return 1
  set -f
  set -- ${_line##*) }
  set +f
  _st=$1 _pg=$3 _start=${20}
}
boot_id() {
  _boot=
  { read -r _boot < /proc/sys/kernel/random/boot_id; } 2>/dev/null || _boot=unknown
}
run_alive() {
  _pid= _why=no-run
  [ -s "$rd/pid" ] || return 1
  read -r _pid < "$rd/pid" || return 1
  case $_pid in ''|*[!0-9]*) return 1;; esac
  _why=died
  if [ ! -r /proc/self/stat ]; then kill -0 "$_pid" 2>/dev/null; return; fi
  if [ -s "$rd/ident" ]; then
    read -r _iboot _istart < "$rd/ident"
    boot_id
    if [ "$_iboot" != "$_boot" ]; then _why=rebooted; return 1; fi
  else
    _istart=
  fi
  proc_stat "/proc/$_pid/stat" || return 1
  case $_st in Z|X|x) return 1;; esac
  [ -z "$_istart" ] || [ "$_istart" = "$_start" ]
}
group_alive() {
  if [ ! -r /proc/self/stat ]; then kill -0 -- "-$1" 2>/dev/null; return; fi
  for _f in /proc/[0-9]*/stat; do
    proc_stat "$_f" || continue
    [ "$_pg" = "$1" ] || continue
    case $_st in Z|X|x) continue;; esac
    return 0
  done
  return 1
}
"""


# ---------------------------------------------------------------------------------------------
# Launch


class LaunchState(StrEnum):
    STARTED = "started"  # a new run was started by this call
    RUNNING = "running"  # a run in this directory was already alive: nothing started
    EXITED = "exited"  # the run in this directory already finished: nothing started
    ERROR = "error"  # could not start; `reason` says why


@dataclass(frozen=True)
class LaunchResult:
    state: LaunchState
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None


def launch_script(
    run_dir: str,
    command: str,
    env: Mapping[str, str],
    secrets_file: str | None = None,
    *,
    workdir: str | None = None,
) -> str:
    """A script that starts `command` detached on the worker, once per run directory.

    The workload runs in its own session and process group (`setsid -f`: a background job of a
    non-interactive shell would start with SIGINT ignored), with stdin from /dev/null and
    stdout + stderr appended to `run_dir/log`, so it survives the SSH connection. `env` is
    exported (the TPUCARED_* contract variables among it). Secrets are sourced from
    `secrets_file` on the worker by the detached wrapper itself, so their values never appear
    in any script, process argument or log. Prints `TPUCARED_LAUNCH state=...`.
    """
    wrapper = _wrapper_script(command, env, secrets_file, workdir)
    secrets_check = ""
    if secrets_file is not None:
        secrets_check = (
            f"[ -r {path_expr(secrets_file)} ] || "
            "{ say state=error reason=secrets-missing; exit 1; }"
        )
    return f"""\
set -u
say() {{ echo "TPUCARED_LAUNCH $*"; }}
rd={path_expr(run_dir)}
mkdir -p -- "$rd" && rd=$(cd -- "$rd" && pwd -P) || {{ say state=error reason=run-dir; exit 1; }}
{_FUNCTIONS}
# Serialize concurrent launches into the same run directory (flock is in util-linux).
if command -v flock >/dev/null 2>&1; then
  exec 9>>"$rd/launch.lock"
  flock -w 60 9 || {{ say state=error reason=lock-timeout; exit 1; }}
fi
if [ -s "$rd/exit_code" ]; then
  read -r code < "$rd/exit_code"
  say "state=exited code=$code"
  exit 0
fi
if run_alive; then
  say "state=running pid=$_pid"
  exit 0
fi
command -v setsid >/dev/null 2>&1 || {{ say state=error reason=no-setsid; exit 1; }}
{secrets_check}
rm -f -- "$rd/pid" "$rd/ident"
printf '%s\\n' {quote(wrapper)} > "$rd/run.sh.tmp" && mv -f -- "$rd/run.sh.tmp" "$rd/run.sh" \\
  || {{ say state=error reason=write-wrapper; exit 1; }}
setsid -f sh "$rd/run.sh" < /dev/null >> "$rd/log" 2>&1 9>&-
i=0
while [ ! -s "$rd/pid" ]; do
  i=$((i + 1))
  [ "$i" -le 200 ] || {{ say state=error reason=no-pid; exit 1; }}
  sleep 0.05
done
read -r pid < "$rd/pid"
say "state=started pid=$pid"
"""


def _wrapper_script(
    command: str, env: Mapping[str, str], secrets_file: str | None, workdir: str | None
) -> str:
    """run.sh: records pid/ident, runs the workload in a subshell, records its exit code."""
    exports = "\n".join(export_lines(env))
    secrets = ""
    if secrets_file is not None:
        # Sourced in the subshell: a broken file fails the run (exit code recorded) instead of
        # killing the wrapper before it can write exit_code.
        secrets = f"  set -a\n  . {path_expr(secrets_file)}\n  set +a\n"
    cd = f"  cd {path_expr(workdir)} || exit 1\n" if workdir is not None else ""
    return f"""\
# Generated by tpucared: runs the workload once; see tpucared/ssh/scripts.py.
rd=${{0%/*}}
put() {{ printf '%s\\n' "$2" > "$rd/$1.tmp" && mv -f -- "$rd/$1.tmp" "$rd/$1"; }}
{_FUNCTIONS}
proc_stat /proc/$$/stat && boot_id && put ident "$_boot $_start"
put pid $$
# Survive the TERM that cleanup sends to the whole group long enough to record the exit code;
# the subshell below gets default handlers (POSIX resets caught traps in subshells).
trap : TERM INT HUP
unset SSH_CLIENT SSH_CONNECTION SSH_TTY SSH_AUTH_SOCK
{exports}
{CHOOSE_SHELL}
echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) start pid=$$"
(
{secrets}{cd}  exec "$tpucared_shell" -c {quote(command)}
)
rc=$?
echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) exit code=$rc"
put exit_code "$rc"
"""


def parse_launch(stdout: str) -> LaunchResult:
    fields = parse_marker(stdout, "TPUCARED_LAUNCH")
    try:
        state = LaunchState(fields.get("state", ""))
    except ValueError as exc:
        raise ScriptOutputError(f"unknown launch state in {fields}") from exc
    return LaunchResult(
        state=state,
        pid=int_field(fields, "pid"),
        exit_code=int_field(fields, "code"),
        reason=fields.get("reason"),
    )


# ---------------------------------------------------------------------------------------------
# Probe


class RunState(StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    GONE = "gone"  # never started here, or died without an exit code (killed, node rebooted)


@dataclass(frozen=True)
class ProbeResult:
    state: RunState
    pid: int | None = None
    exit_code: int | None = None
    log_bytes: int | None = None  # None when there is no log file
    reason: str | None = None  # for GONE: no-run | died | rebooted


def probe_script(run_dir: str) -> str:
    """A script printing `TPUCARED_PROBE state=running pid=P|exited code=C|gone reason=R
    log_bytes=N` for the run in `run_dir`. Cheap: builtins and one `wc`."""
    return f"""\
rd={path_expr(run_dir)}
{_FUNCTIONS}
log=-1
if [ -f "$rd/log" ]; then log=$(wc -c < "$rd/log") && log=$((log)) || log=-1; fi
if [ -s "$rd/exit_code" ]; then
  read -r code < "$rd/exit_code"
  echo "TPUCARED_PROBE state=exited code=$code log_bytes=$log"
elif run_alive; then
  echo "TPUCARED_PROBE state=running pid=$_pid log_bytes=$log"
else
  echo "TPUCARED_PROBE state=gone reason=$_why log_bytes=$log"
fi
"""


def parse_probe(stdout: str) -> ProbeResult:
    fields = parse_marker(stdout, "TPUCARED_PROBE")
    try:
        state = RunState(fields.get("state", ""))
    except ValueError as exc:
        raise ScriptOutputError(f"unknown run state in {fields}") from exc
    log_bytes = int_field(fields, "log_bytes")
    result = ProbeResult(
        state=state,
        pid=int_field(fields, "pid"),
        exit_code=int_field(fields, "code"),
        log_bytes=None if log_bytes is None or log_bytes < 0 else log_bytes,
        reason=fields.get("reason"),
    )
    if state is RunState.RUNNING and result.pid is None:
        raise ScriptOutputError(f"running without a pid: {fields}")
    if state is RunState.EXITED and result.exit_code is None:
        raise ScriptOutputError(f"exited without a code: {fields}")
    return result


def log_tail_command(run_dir: str, *, lines: int = 100, follow: bool = False) -> str:
    """Shell command printing the end of the run's log (for `tpucared logs`)."""
    flag = " -F" if follow else ""
    return f"tail -n {int(lines)}{flag} -- {path_expr(run_dir)}/log"


# ---------------------------------------------------------------------------------------------
# Cleanup


class CleanupState(StrEnum):
    CLEAN = "clean"  # nothing holds the TPU: safe to relaunch
    BUSY = "busy"  # something survived SIGKILL or still holds the TPU: replace the node


@dataclass(frozen=True)
class CleanupResult:
    state: CleanupState
    group: str  # none | terminated (exited on TERM) | killed (needed KILL) | stuck
    holders_killed: int
    lockfile: str  # removed | absent | failed
    busy_pids: tuple[int, ...] = ()
    # False when neither root nor passwordless sudo was available: other users' processes were
    # invisible, so `clean` only speaks for the SSH user's own processes.
    sees_all_processes: bool = True


def cleanup_script(
    run_dir: str | None,
    *,
    grace_seconds: float = 5.0,
    device_patterns: Sequence[str] = DEFAULT_DEVICE_PATTERNS,
    lockfile: str = DEFAULT_LIBTPU_LOCKFILE,
) -> str:
    """A script that frees the TPU on a worker before a relaunch, in the order that works:

    1. TERM the run's process group, wait up to `grace_seconds`, then KILL it;
    2. TERM (then KILL) every remaining process holding a file matching `device_patterns`,
       found by scanning /proc/*/fd (what fuser and lsof do; neither need be installed);
    3. remove the libtpu lock file;
    4. report `busy` if anything still holds a device or the group survived KILL.

    Uses `sudo -n` when not root and it is available (the guest agent gives ssh-keys users
    passwordless sudo), since a wedged holder may belong to another user; without either, the
    result says so (`scope=own`). Prints `TPUCARED_CLEANUP state=clean|busy group=...
    holders_killed=N lockfile=... scope=all|own busy_pids=...`.
    """
    if not device_patterns:
        raise ValueError("device_patterns must not be empty")
    tenths = max(1, math.ceil(grace_seconds * 10))
    pattern_vars = "\n".join(f"p{i}={quote(p)}" for i, p in enumerate(device_patterns))
    pattern_case = "|".join(f"$p{i}" for i in range(len(device_patterns)))
    rd = path_expr(run_dir) if run_dir is not None else "''"
    return f"""\
set -u
rd={rd}
lockfile={path_expr(lockfile)}
steps={tenths}
{pattern_vars}
{_FUNCTIONS}
SUDO= scope=all
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    scope=own
  fi
fi
# wait_while CMD...: poll every 0.1 s while CMD succeeds, at most $steps times.
wait_while() {{
  _i=0
  while "$@"; do
    [ "$_i" -lt "$steps" ] || return 1
    sleep 0.1
    _i=$((_i + 1))
  done
  return 0
}}
holders() {{
  $SUDO ls -l /proc/[0-9]*/fd 2>/dev/null \\
    | awk '/^\\/proc\\/[0-9]+\\/fd:$/ {{ split($0, a, "/"); pid = a[3]; next }}
           / -> / {{ print pid, substr($0, index($0, " -> ") + 4) }}' \\
    | while read -r hp ht; do case $ht in {pattern_case}) echo "$hp";; esac; done \\
    | sort -u
}}
has_holders() {{ [ -n "$(holders)" ]; }}

group=none
proc_stat /proc/$$/stat; mypg=$_pg
if [ -n "$rd" ] && [ -s "$rd/pid" ]; then
  read -r pg < "$rd/pid"
  case $pg in ''|*[!0-9]*) pg=;; esac
  boot_id; ib=$_boot
  [ ! -s "$rd/ident" ] || read -r ib _ < "$rd/ident"
  # A pid recorded before a reboot, or our own group, is not the run's group.
  if [ -n "$pg" ] && [ "$pg" != "$mypg" ] && [ "$ib" = "$_boot" ] && group_alive "$pg"; then
    $SUDO kill -s TERM -- "-$pg" 2>/dev/null
    if wait_while group_alive "$pg"; then
      group=terminated
    else
      $SUDO kill -s KILL -- "-$pg" 2>/dev/null
      group=killed
      wait_while group_alive "$pg" || group=stuck
    fi
  fi
fi

killed=0
hp=$(holders)
if [ -n "$hp" ]; then
  killed=$(echo "$hp" | wc -l)
  $SUDO kill -s TERM $hp 2>/dev/null
  if ! wait_while has_holders; then
    hp=$(holders)
    [ -z "$hp" ] || $SUDO kill -s KILL $hp 2>/dev/null
    wait_while has_holders || true
  fi
fi

if [ -e "$lockfile" ] || [ -L "$lockfile" ]; then
  if $SUDO rm -f -- "$lockfile" && [ ! -e "$lockfile" ]; then lock=removed; else lock=failed; fi
else
  lock=absent
fi

left=$(holders | tr '\\n' ',')
left=${{left%,}}
state=clean
if [ -n "$left" ] || [ "$group" = stuck ]; then state=busy; fi
echo "TPUCARED_CLEANUP state=$state group=$group holders_killed=$((killed))" \\
  "lockfile=$lock scope=$scope busy_pids=$left"
"""


def parse_cleanup(stdout: str) -> CleanupResult:
    fields = parse_marker(stdout, "TPUCARED_CLEANUP")
    try:
        state = CleanupState(fields.get("state", ""))
    except ValueError as exc:
        raise ScriptOutputError(f"unknown cleanup state in {fields}") from exc
    pids = fields.get("busy_pids", "")
    try:
        busy = tuple(int(p) for p in pids.split(",") if p)
    except ValueError as exc:
        raise ScriptOutputError(f"malformed busy_pids {pids!r}") from exc
    return CleanupResult(
        state=state,
        group=fields.get("group", "none"),
        holders_killed=int_field(fields, "holders_killed") or 0,
        lockfile=fields.get("lockfile", "absent"),
        busy_pids=busy,
        sees_all_processes=fields.get("scope", "all") == "all",
    )
