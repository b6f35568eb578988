# notice_wait.sh: waits on one worker for the run's preemption notice, or for the run to stop.
#
# When: the daemon keeps one running per slice with a running attempt (on worker 0), so it
#   hears of a notice at once instead of at the next probe; sent as one `sh -c` command by
#   `scripts.notice_wait_script`, after lib.sh.
# Expects: $1 the run directory, $2 what to wait for: `notice` (run.sh's watcher wrote
#   `notice`) or `stopped` (the run recorded its exit code, or its wrapper is gone), $3 the
#   most steps of 0.2 s to wait (5 a second).
# Prints: TPUCARED_NOTICE state=noticed at=T (T: the notice's epoch seconds) | state=ended
#   (waiting for a notice, the run ended without one) | state=stopped | state=timeout.
#
# Cost. A wait for a notice runs for minutes on every slice with a running attempt, so it
# does not poll the disk (one `sleep` fork five times a second, ~0.25% of a core per slice:
# nothing on a TPU VM, but an emulator's thousand slices share two cores): it holds the same
# request run.sh's watcher holds on the metadata server (`instance/preempted`,
# `wait_for_change` with the ETag of the value it read first, so a change in between is not
# missed), and only once that answers TRUE polls for the `notice` file, which the watcher
# writes right after. Without a metadata server or a client for it (or for `stopped`, which
# lasts at most the stop grace) it polls every 0.2 s as before.
#
# shellcheck shell=sh
rd=$1 what=$2 steps=$3
i=0
# settled: prints the answer and returns 0 when the notice or the run's end is on disk.
settled() {
  if [ "$what" = notice ]; then
    if [ -s "$rd/notice" ]; then
      read -r at < "$rd/notice"
      echo "TPUCARED_NOTICE state=noticed at=$at"
      return 0
    fi
    if [ -s "$rd/exit_code" ]; then echo "TPUCARED_NOTICE state=ended"; return 0; fi
  elif [ -s "$rd/exit_code" ] || ! run_alive; then
    echo "TPUCARED_NOTICE state=stopped"
    return 0
  fi
  return 1
}
# preempted [WAIT]: `instance/preempted` (TRUE or FALSE) in _value, its ETag in _etag; with
# WAIT, held until the value differs from _etag's, at most WAIT seconds. 1 without an answer.
preempted() {
  _url="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/preempted"
  [ -z "$1" ] || _url="$_url?wait_for_change=true&last_etag=$_etag&timeout_sec=$1"
  _out="$rd/.notice_wait.$$"
  (metadata_get "$_url" "$_out.value" "$_out.headers") || { rm -f "$_out".*; return 1; }
  _etag=$(sed -n 's/^[Ee][Tt][Aa][Gg]: *\([^[:space:]]*\).*/\1/p' "$_out.headers")
  read -r _value < "$_out.value" || _value=$(cat "$_out.value")
  rm -f "$_out".*
  [ -n "$_etag" ]
}
settled && exit 0
if [ "$what" = notice ] && [ "$steps" -ge 10 ] && preempted; then
  if [ "$_value" != TRUE ] && preempted $((steps / 5)) && [ "$_value" != TRUE ]; then
    settled && exit 0
    echo "TPUCARED_NOTICE state=timeout"  # held the whole wait: no notice
    exit 0
  fi
  # TRUE (or the request failed): run.sh's watcher writes `notice` right after; poll for it
  # for what is left of a short while.
  steps=50
fi
while [ "$i" -lt "$steps" ]; do
  settled && exit 0
  sleep 0.2
  i=$((i + 1))
done
echo "TPUCARED_NOTICE state=timeout"
