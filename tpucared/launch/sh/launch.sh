# launch.sh: starts a workload detached on a worker, once per run directory.
#
# When: once per worker per attempt (and again after a daemon crash: idempotent); sent as one
#   `sh -c` command by `scripts.launch_script`, after lib.sh.
# Expects: $1 the run directory (created if missing), $2 the secrets file on the worker or ''
#   for none, $3 the text of the wrapper (run.sh with its own parameters) to write and start.
# Prints: TPUCARED_LAUNCH state=started pid=P | state=running pid=P (already alive, nothing
#   started) | state=exited code=C (already finished, nothing started) | state=error reason=R.
#
# The run directory holds exactly one run:
#   run.sh      the wrapper (what was run; no secret values in it)
#   pid         pid of the wrapper = the run's process group and session id
#   ident       "<boot id> <process start time>" of the wrapper, so a reused pid or a rebooted
#               machine is never mistaken for the run
#   log         stdout + stderr of the workload (appended), plus "[tpucared]" start/exit lines
#   exit_code   written atomically (tmp + mv) when the workload exits
# The workload runs in its own session and process group (`setsid -f`: a background job of a
# non-interactive shell would start with SIGINT ignored), stdin from /dev/null, so it survives
# the SSH connection.
#
# shellcheck shell=sh
set -u
rd=$1 secrets=$2 wrapper=$3
say() { echo "TPUCARED_LAUNCH $*"; }
{ mkdir -p -- "$rd" && rd=$(cd -- "$rd" && pwd -P); } || { say state=error reason=run-dir; exit 1; }
# Serialize concurrent launches into the same run directory (flock is in util-linux).
if command -v flock >/dev/null 2>&1; then
  exec 9>>"$rd/launch.lock"
  flock -w 60 9 || { say state=error reason=lock-timeout; exit 1; }
fi
if [ -s "$rd/exit_code" ]; then
  read -r code < "$rd/exit_code"
  say "state=exited code=$code"
  exit 0
fi
if run_alive; then
  # _pid is set by run_alive (lib.sh).
  # shellcheck disable=SC2154
  say "state=running pid=$_pid"
  exit 0
fi
command -v setsid >/dev/null 2>&1 || { say state=error reason=no-setsid; exit 1; }
if [ -n "$secrets" ]; then
  [ -r "$secrets" ] || { say state=error reason=secrets-missing; exit 1; }
fi
rm -f -- "$rd/pid" "$rd/ident"
{ printf '%s\n' "$wrapper" > "$rd/run.sh.tmp" && mv -f -- "$rd/run.sh.tmp" "$rd/run.sh"; } \
  || { say state=error reason=write-wrapper; exit 1; }
setsid -f sh "$rd/run.sh" < /dev/null >> "$rd/log" 2>&1 9>&-
i=0
while [ ! -s "$rd/pid" ]; do
  i=$((i + 1))
  [ "$i" -le 200 ] || { say state=error reason=no-pid; exit 1; }
  sleep 0.05
done
read -r pid < "$rd/pid"
say "state=started pid=$pid"
