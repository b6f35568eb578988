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
#   notice, also the workload's TPUCARED_PREEMPTION_NOTICE_FILE) when the metadata server says
#   the VM is about to stop, just after `notice_kind`: `preempted` (the VM is being preempted)
#   or `maintenance` (it is about to be terminated for host maintenance). `notice` is written
#   once, by whichever watcher hears first; its format is the same for both kinds.
#
# The notice watchers are two background subshells of this wrapper, in the run's process group
# (so a cleanup kills them with the run, and nothing else runs on the VM for them). Each holds
# one request on the metadata server (`wait_for_change`, with the ETag of the previous answer,
# at `$GCE_METADATA_HOST` or metadata.google.internal, header Metadata-Flavor: Google, by curl
# or else python3): one on `instance/preempted`, whose TRUE is the preemption notice; one on
# `instance/maintenance-event`, whose TERMINATE_ON_HOST_MAINTENANCE is the host-maintenance
# notice. Either writes `notice_kind` and `notice` and sends the signal to the run's process
# group; a `mkdir` of `.noticed` (atomic) lets only the first do it. The wrapper traps every
# allowed signal, so it lives on to record the exit code; the workload's subshell has default
# handlers. When the workload exits, the wrapper stops the watchers and their pending requests.
#
# `instance/maintenance-event` (compute/docs/metadata/getting-live-migration-notice,
# https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice) is NONE, turns
# MIGRATE_ON_HOST_MAINTENANCE (a live migration: the VM keeps running, so no notice) or
# TERMINATE_ON_HOST_MAINTENANCE 60 s before a maintenance event, and NONE again after it;
# Google's own watcher (GoogleCloudPlatform/python-docs-samples compute/metadata/main.py) holds
# it with `last_etag` and retries the 503 it may answer during maintenance, as the loop below
# does any failure. TPU VMs cannot live-migrate (onHostMaintenance TERMINATE: [3P]
# google-deepmind weathernext TPU VM guide, docs/research/compute-engine.md 1.3; the only
# policy of a spot or preemptible VM, compute_v1 `Scheduling.OnHostMaintenance`); a TPU VM's
# metadata server tells of maintenance too (tpu/docs/view-maintenance-notifications). Google
# warns only a VM that has read the key since its last event ("If you have never queried the
# maintenance-event metadata key ... Compute Engine assumes that the VM doesn't require
# advance warning"), so the watcher holds a request on it from the run's start.
#
# shellcheck shell=sh
tpucared_command=$1 tpucared_secrets=$2 tpucared_workdir=$3 tpucared_stop=$4
shift 4
rd=${0%/*}
# notice_watch SIGNAL KEY VALUE KIND: one notice watcher (above), in the background: holds
# `instance/KEY` until it reads VALUE; then, unless the other watcher heard first, writes
# notice_kind (KIND) and notice, and sends SIGNAL to the run's process group.
notice_watch() {
  _url="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/$2"
  _etag=0 _req='' _fails=0 _out="$rd/.notice-$4"
  # Stopped by run.sh when the workload exits: the pending request goes too.
  trap 'if [ -n "$_req" ]; then kill "$_req" 2>/dev/null; fi; exit 0' TERM
  while :; do
    metadata_get "$_url?wait_for_change=true&last_etag=$_etag&timeout_sec=3600" \
      "$_out.value" "$_out.headers" &
    _req=$!
    wait "$_req"
    _got=$?
    _req=''
    if [ "$_got" -eq 2 ]; then echo "[tpucared] no curl or python3: no $4 notice"; return; fi
    if [ "$_got" -ne 0 ]; then
      # No metadata server (yet), or a 503 during maintenance: keep asking, every second at
      # first, then every 5 s.
      _fails=$((_fails + 1))
      if [ "$_fails" -le 10 ]; then sleep 1; else sleep 5; fi
      continue
    fi
    _etag=$(sed -n 's/^[Ee][Tt][Aa][Gg]: *\([^[:space:]]*\).*/\1/p' "$_out.headers")
    [ -n "$_etag" ] || _etag=0
    _value=$(cat "$_out.value" 2>/dev/null)
    [ "$_value" = "$3" ] || continue
    mkdir "$rd/.noticed" 2>/dev/null || return  # the other watcher heard first
    _at=$(date +%s.%N 2>/dev/null) || _at=$(date +%s)
    case $_at in *N) _at=$(date +%s);; esac
    put notice_kind "$4"  # before `notice`: whoever sees `notice` can read its kind
    put notice "$_at"
    echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) $4 notice ($2 $3): sending SIG$1"
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
tpucared_watchers=
export TPUCARED_PROGRESS_FILE="$rd/progress"  # its `step N` lines, read by probe.sh
if [ -n "$tpucared_stop" ]; then
  export TPUCARED_PREEMPTION_NOTICE_FILE="$rd/notice"
  rmdir "$rd/.noticed" 2>/dev/null  # a relaunch into this directory hears its own notice
  notice_watch "$tpucared_stop" preempted TRUE preempted &
  tpucared_watchers=$!
  notice_watch "$tpucared_stop" maintenance-event TERMINATE_ON_HOST_MAINTENANCE maintenance &
  tpucared_watchers="$tpucared_watchers $!"
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
# Two pids, split on purpose.
# shellcheck disable=SC2086
[ -z "$tpucared_watchers" ] || kill $tpucared_watchers 2>/dev/null
echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) exit code=$rc"
put exit_code "$rc"
