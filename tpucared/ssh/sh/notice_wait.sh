# notice_wait.sh: waits on one worker for the run's preemption notice, or for the run to stop.
#
# When: the daemon keeps one running per slice with a running attempt (on worker 0), so it
#   hears of a notice at once instead of at the next probe; sent as one `sh -c` command by
#   `scripts.notice_wait_script`, after lib.sh. Cheap: one `sleep 0.2` per poll.
# Expects: $1 the run directory, $2 what to wait for: `notice` (run.sh's watcher wrote
#   `notice`) or `stopped` (the run recorded its exit code, or its wrapper is gone), $3 the
#   most tenths of a second to wait.
# Prints: TPUCARED_NOTICE state=noticed at=T (T: the notice's epoch seconds) | state=ended
#   (waiting for a notice, the run ended without one) | state=stopped | state=timeout.
#
# shellcheck shell=sh
rd=$1 what=$2 steps=$3
i=0
while [ "$i" -lt "$steps" ]; do
  if [ "$what" = notice ]; then
    if [ -s "$rd/notice" ]; then
      read -r at < "$rd/notice"
      echo "TPUCARED_NOTICE state=noticed at=$at"
      exit 0
    fi
    if [ -s "$rd/exit_code" ]; then echo "TPUCARED_NOTICE state=ended"; exit 0; fi
  elif [ -s "$rd/exit_code" ] || ! run_alive; then
    echo "TPUCARED_NOTICE state=stopped"
    exit 0
  fi
  sleep 0.2
  i=$((i + 1))
done
echo "TPUCARED_NOTICE state=timeout"
