# run.sh: the wrapper that runs one attempt's workload and records what happened.
#
# When: written into the run directory by launch.sh (with its parameters, so the file says
#   what was run) and started there detached: `setsid -f sh RUN_DIR/run.sh`. Runs once.
# Expects: $1 the workload command (run by bash when the worker has it, as
#   `gcloud ... ssh --command` would, else sh), $2 the secrets file or '' (sourced with
#   `set -a` in the workload's subshell only, so a broken file fails the run instead of the
#   wrapper), $3 the working directory or '', $4 the signal the workload gets on a preemption
#   notice (TERM, INT, HUP, USR1, USR2 or QUIT; '' for no notice watcher), then NAME=value
#   words to export (the TPUCARED_* contract variables among them). Its run directory is its
#   own: ${0%/*}.
# Writes: ident, pid, then exit_code when the workload exits (see launch.sh); start and exit
#   lines to stdout, which launch.sh appends to the log; `notice` (the epoch seconds of the
#   preemption notice, also the workload's TPUCARED_PREEMPTION_NOTICE_FILE) when the metadata
#   server says the VM is being preempted.
#
# The notice watcher is a background subshell of this wrapper, in the run's process group (so
# a cleanup kills it with the run, and nothing else runs on the VM for it): it waits on the
# metadata server's `instance/preempted` (`wait_for_change`, with the ETag of the previous
# answer, at `$GCE_METADATA_HOST` or metadata.google.internal, header Metadata-Flavor: Google,
# by curl or else python3), and on TRUE writes `notice` and sends the signal to the run's
# process group. The wrapper traps every allowed signal, so it lives on to record the exit
# code; the workload's subshell has default handlers. When the workload exits, the wrapper
# stops the watcher and its pending request.
#
# shellcheck shell=sh
tpucared_command=$1 tpucared_secrets=$2 tpucared_workdir=$3 tpucared_stop=$4
shift 4
rd=${0%/*}
# notice_watch SIGNAL: the preemption notice watcher (above); runs in the background.
notice_watch() {
  _url="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/preempted"
  _etag=0 _req='' _fails=0
  # Stopped by run.sh when the workload exits: the pending request goes too.
  trap 'if [ -n "$_req" ]; then kill "$_req" 2>/dev/null; fi; exit 0' TERM
  while :; do
    metadata_get "$_url?wait_for_change=true&last_etag=$_etag&timeout_sec=3600" \
      "$rd/.notice.value" "$rd/.notice.headers" &
    _req=$!
    wait "$_req"
    _got=$?
    _req=''
    if [ "$_got" -eq 2 ]; then echo "[tpucared] no curl or python3: no preemption notice"; return; fi
    if [ "$_got" -ne 0 ]; then
      # No metadata server (yet): keep asking, every second at first, then every 5 s.
      _fails=$((_fails + 1))
      if [ "$_fails" -le 10 ]; then sleep 1; else sleep 5; fi
      continue
    fi
    _etag=$(sed -n 's/^[Ee][Tt][Aa][Gg]: *\([^[:space:]]*\).*/\1/p' "$rd/.notice.headers")
    [ -n "$_etag" ] || _etag=0
    _value=$(cat "$rd/.notice.value" 2>/dev/null)
    [ "$_value" = TRUE ] || continue
    _at=$(date +%s.%N 2>/dev/null) || _at=$(date +%s)
    case $_at in *N) _at=$(date +%s);; esac
    printf '%s\n' "$_at" > "$rd/notice.tmp" && mv -f -- "$rd/notice.tmp" "$rd/notice"
    echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) preemption notice: sending SIG$1"
    kill -s "$1" -- "-$$" 2>/dev/null
    return
  done
}
put() { printf '%s\n' "$2" > "$rd/$1.tmp" && mv -f -- "$rd/$1.tmp" "$rd/$1"; }
# _boot and _start are set by boot_id and proc_stat (lib.sh).
# shellcheck disable=SC2154
proc_stat /proc/$$/stat && boot_id && put ident "$_boot $_start"
put pid $$
# Survive the TERM that cleanup sends to the whole group long enough to record the exit code,
# and the notice's signal; the subshell below gets default handlers (POSIX resets caught traps
# in subshells).
trap : TERM INT HUP USR1 USR2 QUIT
unset SSH_CLIENT SSH_CONNECTION SSH_TTY SSH_AUTH_SOCK
# Exports the NAME=value words themselves (export alone would list the environment).
# shellcheck disable=SC2163
[ "$#" -eq 0 ] || export "$@"
# bash when present, as a command written for `gcloud ... ssh --command` expects
# (`source venv/bin/activate && ...`); plain sh otherwise.
if command -v bash >/dev/null 2>&1; then tpucared_shell='bash'; else tpucared_shell='sh'; fi
echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) start pid=$$"
tpucared_watcher=
export TPUCARED_PROGRESS_FILE="$rd/progress"  # its `step N` lines, read by probe.sh
if [ -n "$tpucared_stop" ]; then
  export TPUCARED_PREEMPTION_NOTICE_FILE="$rd/notice"
  notice_watch "$tpucared_stop" &
  tpucared_watcher=$!
fi
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
# In the foreground, not `&`: an asynchronous list would start with SIGINT ignored. A trapped
# signal arriving meanwhile runs its (empty) trap once the workload is done.
rc=$?
[ -z "$tpucared_watcher" ] || kill "$tpucared_watcher" 2>/dev/null
echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) exit code=$rc"
put exit_code "$rc"
