# signal.sh: sends a run's process group the preemption notice's signal, on a worker whose own
#   VM got no notice: another slice of the same multislice job did.
#
# When: the daemon heard a notice on one slice of a multislice job (notice_wait.sh); it sends
#   this to every worker of the other slices at once, so the whole job stops as one (each
#   process checkpoints and exits, as a single slice does on its notice); sent as one `sh -c`
#   command by `scripts.signal_script`, after lib.sh.
# Expects: $1 the run directory, $2 the signal name (TERM, INT, HUP, USR1, USR2 or QUIT).
# Prints: TPUCARED_SIGNAL state=sent | state=none (no run alive there: nothing to stop).
#
# The run's wrapper (run.sh) traps the signal and lives on to record the workload's exit code,
# as it does for its own notice. Only a line in the run's log says so: no `notice` file, so
# the run's probe does not read as noticed on this slice (its node is not being preempted).
#
# shellcheck shell=sh
rd=$1 sig=$2
# _pid is set by run_alive (lib.sh).
# shellcheck disable=SC2154
if run_alive && kill -s "$sig" -- "-$_pid" 2>/dev/null; then
  echo "[tpucared] $(date -u +%Y-%m-%dT%H:%M:%SZ) preemption notice on another slice: sent SIG$sig" >> "$rd/log"
  echo "TPUCARED_SIGNAL state=sent"
else
  echo "TPUCARED_SIGNAL state=none"
fi
