# notice_wait.sh: waits on one worker for the run's notice (a preemption or a host-maintenance
#   termination), or for the run to stop.
#
# When: the daemon keeps one running per slice with a running attempt (on worker 0), so it
#   hears of a notice at once instead of at the next probe; sent as one `sh -c` command by
#   `scripts.notice_wait_script`, after lib.sh.
# Expects: $1 the run directory, $2 what to wait for: `notice` (run.sh's watcher wrote
#   `notice`) or `stopped` (the run recorded its exit code, or its wrapper is gone), $3 the
#   most steps of 0.2 s to wait (5 a second).
# Prints: TPUCARED_NOTICE state=noticed at=T kind=K (T: the notice's epoch seconds; K: the
#   run's `notice_kind`, preempted or maintenance, left out when the run wrote none) |
#   state=ended (waiting for a notice, the run ended without one) | state=stopped |
#   state=timeout.
#
# Cost. A wait for a notice runs for minutes on every slice with a running attempt, so it
# does not poll the disk (one `sleep` fork five times a second, ~0.25% of a core per slice:
# nothing on a TPU VM, but an emulator's thousand slices share two cores): it holds the same
# two requests run.sh's watchers hold on the metadata server, `instance/preempted` (TRUE) and
# `instance/maintenance-event` (TERMINATE_ON_HOST_MAINTENANCE; MIGRATE_ON_HOST_MAINTENANCE and
# NONE are no notice: held again), each in a background subshell (`hold`) with
# `wait_for_change` and the ETag of the value it read first, so a change in between is not
# missed. The script sleeps in a `read` of a FIFO until one of them says `notice` (then polls
# for the `notice` file, which the watcher writes right after) or `timeout`. The FIFO is
# opened read-write (`<>`, which never blocks on Linux; POSIX leaves it undefined), unlinked
# at once, and written through the inherited descriptor 3: POSIX sh has no `wait -n`.
# Without a metadata server or a client for it, or without a FIFO (or for `stopped`, which
# lasts at most the stop grace), it polls every 0.2 s as before.
#
# shellcheck shell=sh
rd=$1 what=$2 steps=$3
i=0
# settled: prints the answer and returns 0 when the notice or the run's end is on disk.
settled() {
  if [ "$what" = notice ]; then
    if [ -s "$rd/notice" ]; then
      read -r at < "$rd/notice"
      kind=
      if [ -s "$rd/notice_kind" ]; then read -r kind < "$rd/notice_kind" && kind=" kind=$kind"; fi
      echo "TPUCARED_NOTICE state=noticed at=$at$kind"
      return 0
    fi
    if [ -s "$rd/exit_code" ]; then echo "TPUCARED_NOTICE state=ended"; return 0; fi
  elif [ -s "$rd/exit_code" ] || ! run_alive; then
    echo "TPUCARED_NOTICE state=stopped"
    return 0
  fi
  return 1
}
# metadata KEY [WAIT]: `instance/KEY` in _value, its ETag in _etag; with WAIT, held until the
# value differs from _etag's, at most WAIT seconds. 1 without an answer. The request runs in
# the background (_req) so that hold's TERM ends it at once.
metadata() {
  _url="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/$1"
  [ -z "$2" ] || _url="$_url?wait_for_change=true&last_etag=$_etag&timeout_sec=$2"
  metadata_get "$_url" "$_out.value" "$_out.headers" 3>&- &
  _req=$!
  wait "$_req"
  _got=$?
  _req=''
  [ "$_got" -eq 0 ] || return 1
  _etag=$(sed -n 's/^[Ee][Tt][Aa][Gg]: *\([^[:space:]]*\).*/\1/p' "$_out.headers")
  read -r _value < "$_out.value" || _value=$(cat "$_out.value")
  [ -n "$_etag" ]
}
# hold KEY VALUE: one watcher, in the background: reads `instance/KEY`, then holds it until it
# reads VALUE (says `notice`), the wait's end (`timeout`) or a failed request (`failed`); says
# it on descriptor 3. Stopped by TERM once the other watcher has answered.
hold() {
  _out="$rd/.notice_wait.$$.$1" _req='' _etag=''
  trap 'if [ -n "$_req" ]; then kill "$_req" 2>/dev/null; fi; rm -f "$_out".*; exit 0' TERM
  _said=notice
  if metadata "$1"; then
    while [ "$_value" != "$2" ]; do
      _left=$((end - $(date +%s)))
      if [ "$_left" -le 0 ]; then _said=timeout; break; fi
      metadata "$1" "$_left" || { _said=failed; break; }
    done
  else
    _said=failed
  fi
  rm -f "$_out".*
  echo "$_said" >&3
}
settled && exit 0
if [ "$what" = notice ] && [ "$steps" -ge 10 ] && fifo="$rd/.notice_wait.$$.fifo" \
  && mkfifo "$fifo" 2>/dev/null; then
  # `command`: a failed redirection of `exec` would end the script, not fail the test.
  if command exec 3<>"$fifo"; then
    rm -f "$fifo"
    end=$(($(date +%s) + steps / 5))
    hold preempted TRUE > /dev/null 2>&1 &
    held=$!
    hold maintenance-event TERMINATE_ON_HOST_MAINTENANCE > /dev/null 2>&1 &
    held="$held $!"
    heard='' failed=0
    while [ "$failed" -lt 2 ] && read -r said <&3; do
      case $said in
        notice|timeout) heard=$said; break;;
        *) failed=$((failed + 1));;  # that key cannot be read here: the other may
      esac
    done
    # Two pids, split on purpose.
    # shellcheck disable=SC2086
    kill $held 2>/dev/null
    wait
    exec 3<&-
    case $heard in
      timeout)
        settled && exit 0
        echo "TPUCARED_NOTICE state=timeout"  # held the whole wait: no notice
        exit 0;;
      # run.sh's watcher writes `notice` right after: poll for it for a short while.
      notice) steps=50;;
      # No metadata server to hold: poll the disk for what is left of the wait.
      *) steps=$(((end - $(date +%s)) * 5));;
    esac
  else
    rm -f "$fifo"
  fi
fi
while [ "$i" -lt "$steps" ]; do
  settled && exit 0
  sleep 0.2
  i=$((i + 1))
done
echo "TPUCARED_NOTICE state=timeout"
