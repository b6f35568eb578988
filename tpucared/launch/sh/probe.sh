# probe.sh: says whether the run in a run directory is running, has exited, or is gone.
#
# When: on every watch tick, on every worker of a running attempt (and by `tpucared status`);
#   sent as one `sh -c` command by `scripts.probe_script`, after lib.sh. Cheap: builtins and
#   one `wc`; with a progress file, a `wc`, `head`/`tail` of 4 KiB, `sed`, `awk` and `date`.
# Expects: $1 the run directory (see launch.sh for its files).
# Prints: TPUCARED_PROBE state=running pid=P | state=exited code=C | state=gone reason=R
#   (R: no-run, died, rebooted), then log_bytes=N (the log's size, -1 without a log), then
#   notice=T when the run's watcher saw a preemption notice (T: its epoch seconds), and
#   notice_kind=preempted|maintenance (which: run.sh's notice_kind), then what
#   the workload's progress file tells, when it has one (TPUCARED_PROGRESS_FILE, `progress`):
#   step=N step_at=T checkpoint=N checkpoint_at=T first_step_at=T progress_at=T (each only
#   when known; progress_at: the file's modification time). Read from the file's first and
#   last 4096 bytes only, lines over 80 bytes and anything not `step N [T]` or
#   `checkpoint N [T]` ignored (core/workload/progress.py keeps these bounds).
#
# shellcheck shell=sh
rd=$1
log=-1
if [ -f "$rd/log" ]; then log=$(wc -c < "$rd/log") && log=$((log)) || log=-1; fi
notice=
if [ -s "$rd/notice" ]; then read -r notice < "$rd/notice" && notice=" notice=$notice"; fi
# Which notice (run.sh: preempted or maintenance), where the run's watcher wrote it.
if [ -n "$notice" ] && [ -s "$rd/notice_kind" ]; then
  read -r _kind < "$rd/notice_kind" && case $_kind in
    preempted|maintenance) notice="$notice notice_kind=$_kind" ;;
  esac
fi
prog=
pf=$rd/progress
if [ -s "$pf" ]; then
  size=$(wc -c < "$pf") && size=$((size)) || size=0
  # A big file: its first and last 4 KiB, without the lines the cuts break.
  prog=$({ if [ "$size" -gt 4096 ]; then head -c 4096 -- "$pf" | sed '$d'
      tail -c 4096 -- "$pf" | sed 1d; else cat -- "$pf"; fi; } 2>/dev/null | awk '
    length($0) > 80 || NF < 2 || NF > 3 || $2 !~ /^[0-9]+$/ || length($2) > 15 { next }
    { t = ($3 ~ /^[0-9]+(\.[0-9]+)?$/ && length($3) <= 20) ? $3 : "" }
    NF == 3 && t == "" { next }
    $1 == "step" { if (!seen) { seen = 1; first = t }; s = $2; st = t }
    $1 == "checkpoint" { c = $2; ct = t }
    END {
      if (s != "") printf " step=%s", s; if (st != "") printf " step_at=%s", st
      if (c != "") printf " checkpoint=%s", c; if (ct != "") printf " checkpoint_at=%s", ct
      if (first != "") printf " first_step_at=%s", first
    }')
  mtime=$(date -r "$pf" +%s 2>/dev/null) && prog="$prog progress_at=$mtime"
fi
exited() {
  read -r code < "$rd/exit_code"
  echo "TPUCARED_PROBE state=exited code=$code log_bytes=$log$notice$prog"
}
# _pid and _why are set by run_alive (lib.sh).
# shellcheck disable=SC2154
if [ -s "$rd/exit_code" ]; then
  exited
elif run_alive; then
  echo "TPUCARED_PROBE state=running pid=$_pid log_bytes=$log$notice$prog"
elif [ -s "$rd/exit_code" ]; then
  # The run wrote its exit code and ended between the two checks above: it exited, it did
  # not die (without this a clean exit 0 could be judged a crash).
  exited
else
  echo "TPUCARED_PROBE state=gone reason=$_why log_bytes=$log$notice$prog"
fi
