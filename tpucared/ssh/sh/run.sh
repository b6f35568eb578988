# run.sh: the wrapper that runs one attempt's workload and records what happened.
#
# When: written into the run directory by launch.sh (with its parameters, so the file says
#   what was run) and started there detached: `setsid -f sh RUN_DIR/run.sh`. Runs once.
# Expects: $1 the workload command (run by bash when the worker has it, as
#   `gcloud ... ssh --command` would, else sh), $2 the secrets file or '' (sourced with
#   `set -a` in the workload's subshell only, so a broken file fails the run instead of the
#   wrapper), $3 the working directory or '', then NAME=value words to export (the TPUCARED_*
#   contract variables among them). Its run directory is its own: ${0%/*}.
# Writes: ident, pid, then exit_code when the workload exits (see launch.sh); start and exit
#   lines to stdout, which launch.sh appends to the log.
#
# shellcheck shell=sh
tpucared_command=$1 tpucared_secrets=$2 tpucared_workdir=$3
shift 3
rd=${0%/*}
put() { printf '%s\n' "$2" > "$rd/$1.tmp" && mv -f -- "$rd/$1.tmp" "$rd/$1"; }
# _boot and _start are set by boot_id and proc_stat (lib.sh).
# shellcheck disable=SC2154
proc_stat /proc/$$/stat && boot_id && put ident "$_boot $_start"
put pid $$
# Survive the TERM that cleanup sends to the whole group long enough to record the exit code;
# the subshell below gets default handlers (POSIX resets caught traps in subshells).
trap : TERM INT HUP
unset SSH_CLIENT SSH_CONNECTION SSH_TTY SSH_AUTH_SOCK
# Exports the NAME=value words themselves (export alone would list the environment).
# shellcheck disable=SC2163
[ "$#" -eq 0 ] || export "$@"
# bash when present, as a command written for `gcloud ... ssh --command` expects
# (`source venv/bin/activate && ...`); plain sh otherwise.
if command -v bash >/dev/null 2>&1; then tpucared_shell='bash'; else tpucared_shell='sh'; fi
echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) start pid=$$"
(
  if [ -n "$tpucared_secrets" ]; then
    set -a
    # The user's secrets file on the worker: nothing shellcheck can follow.
    # shellcheck disable=SC1090
    . "$tpucared_secrets"
    set +a
  fi
  if [ -n "$tpucared_workdir" ]; then cd "$tpucared_workdir" || exit 1; fi
  exec "$tpucared_shell" -c "$tpucared_command"
)
rc=$?
echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) exit code=$rc"
put exit_code "$rc"
