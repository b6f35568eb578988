# probe.sh: says whether the run in a run directory is running, has exited, or is gone.
#
# When: on every watch tick, on every worker of a running attempt (and by `tpucared status`);
#   sent as one `sh -c` command by `scripts.probe_script`, after lib.sh. Cheap: builtins and
#   one `wc`.
# Expects: $1 the run directory (see launch.sh for its files).
# Prints: TPUCARED_PROBE state=running pid=P | state=exited code=C | state=gone reason=R
#   (R: no-run, died, rebooted), then log_bytes=N (the log's size, -1 without a log), then
#   notice=T when the run's watcher saw a preemption notice (T: its epoch seconds).
#
# shellcheck shell=sh
rd=$1
log=-1
if [ -f "$rd/log" ]; then log=$(wc -c < "$rd/log") && log=$((log)) || log=-1; fi
notice=
if [ -s "$rd/notice" ]; then read -r notice < "$rd/notice" && notice=" notice=$notice"; fi
exited() {
  read -r code < "$rd/exit_code"
  echo "TPUCARED_PROBE state=exited code=$code log_bytes=$log$notice"
}
# _pid and _why are set by run_alive (lib.sh).
# shellcheck disable=SC2154
if [ -s "$rd/exit_code" ]; then
  exited
elif run_alive; then
  echo "TPUCARED_PROBE state=running pid=$_pid log_bytes=$log$notice"
elif [ -s "$rd/exit_code" ]; then
  # The run wrote its exit code and ended between the two checks above: it exited, it did
  # not die (without this a clean exit 0 could be judged a crash).
  exited
else
  echo "TPUCARED_PROBE state=gone reason=$_why log_bytes=$log$notice"
fi
