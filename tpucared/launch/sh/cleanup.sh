# cleanup.sh: frees the TPU on a worker before a relaunch, in the order that works:
#   1. TERM the run's process group, wait up to the grace period, then KILL it;
#   2. TERM (then KILL) every remaining process holding a file matching a device pattern,
#      found by scanning /proc/*/fd (what fuser and lsof do; neither need be installed);
#   3. remove the libtpu lock file;
#   4. report busy if anything still holds a device or the group survived KILL;
#   5. when the TPU is free and a health check is given, run it (under `timeout`) and report
#      its exit code, its output's last lines on TPUCARED_HEALTH_OUT lines before the marker.
# Uses `sudo -n` when not root and it is available (the guest agent gives ssh-keys users
# passwordless sudo), since a wedged holder may belong to another user; without either, the
# result says so (scope=own).
#
# When: before every new attempt, on every worker (the pre-launch check: a first launch on a
#   node too, with no run to stop); sent as one `sh -c` command by `scripts.cleanup_script`,
#   after lib.sh.
# Expects: $1 the run directory or '' (no run to stop: holders and lock file only), $2 the
#   libtpu lock file, $3 the grace period in tenths of a second (how many 0.1 s polls to wait
#   for each step), $4 the fleet's health check command or '' (none), $5 its timeout in
#   seconds, then one or more device patterns (shell globs, e.g. /dev/accel*).
#   $TPUCARED_DEVICE_ROOT, when set (the emulator's simulated workers, which share one
#   machine), is put in front of the patterns and the lock file; unset on a real VM.
# Prints: TPUCARED_CLEANUP state=clean|busy group=none|terminated|killed|stuck
#   holders_killed=N lockfile=removed|absent|failed scope=all|own busy_pids=P,P...
#   health=none|ok|failed health_code=N
#
# shellcheck shell=sh
set -u
rd=$1 lockfile=$2 steps=$3 hc=$4 hc_secs=$5
shift 5
root=${TPUCARED_DEVICE_ROOT:-}
if [ -n "$root" ]; then
  _n=$#
  # A path already under the root (a test naming one worker's device) is kept as it is.
  while [ "$_n" -gt 0 ]; do
    case $1 in "$root"/*) set -- "$@" "$1";; *) set -- "$@" "$root$1";; esac
    shift; _n=$((_n - 1))
  done
  case $lockfile in "$root"/*) ;; *) lockfile=$root$lockfile;; esac
fi
# "$@" is now the device patterns: holders and has_holders take them as their arguments.
SUDO='' scope=all
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    scope=own
  fi
fi
# wait_while CMD...: poll every 0.1 s while CMD succeeds, at most $steps times.
wait_while() {
  _i=0
  while "$@"; do
    [ "$_i" -lt "$steps" ] || return 1
    sleep 0.1
    _i=$((_i + 1))
  done
  return 0
}
# holders PATTERN...: pids of the processes holding a file matching one of the patterns.
holders() {
  $SUDO ls -l /proc/[0-9]*/fd 2>/dev/null \
    | awk '/^\/proc\/[0-9]+\/fd:$/ { split($0, a, "/"); pid = a[3]; next }
           / -> / { print pid, substr($0, index($0, " -> ") + 4) }' \
    | while read -r hp ht; do
        for p; do
          # The patterns are globs on purpose.
          # shellcheck disable=SC2254
          case $ht in $p) echo "$hp"; break;; esac
        done
      done \
    | sort -u
}
has_holders() { [ -n "$(holders "$@")" ]; }

group=none
proc_stat /proc/$$/stat
# _pg and _boot are set by proc_stat and boot_id (lib.sh).
# shellcheck disable=SC2154
mypg=$_pg
# shellcheck disable=SC2154
if [ -n "$rd" ] && [ -s "$rd/pid" ]; then
  read -r pg < "$rd/pid"
  case $pg in ''|*[!0-9]*) pg=;; esac
  boot_id; ib=$_boot
  [ ! -s "$rd/ident" ] || read -r ib _ < "$rd/ident"
  # A pid recorded before a reboot, or our own group, is not the run's group.
  if [ -n "$pg" ] && [ "$pg" != "$mypg" ] && [ "$ib" = "$_boot" ] && group_alive "$pg"; then
    $SUDO kill -s TERM -- "-$pg" 2>/dev/null
    if wait_while group_alive "$pg"; then
      group=terminated
    else
      $SUDO kill -s KILL -- "-$pg" 2>/dev/null
      group=killed
      wait_while group_alive "$pg" || group=stuck
    fi
  fi
fi

killed=0
hp=$(holders "$@")
if [ -n "$hp" ]; then
  killed=$(echo "$hp" | wc -l)
  # $hp is a list of pids: split on purpose.
  # shellcheck disable=SC2086
  $SUDO kill -s TERM $hp 2>/dev/null
  if ! wait_while has_holders "$@"; then
    hp=$(holders "$@")
    # shellcheck disable=SC2086
    [ -z "$hp" ] || $SUDO kill -s KILL $hp 2>/dev/null
    wait_while has_holders "$@" || true
  fi
fi

if [ -e "$lockfile" ] || [ -L "$lockfile" ]; then
  if $SUDO rm -f -- "$lockfile" && [ ! -e "$lockfile" ]; then lock=removed; else lock=failed; fi
else
  lock=absent
fi

left=$(holders "$@" | tr '\n' ',')
left=${left%,}
state=clean
if [ -n "$left" ] || [ "$group" = stuck ]; then state=busy; fi

# The fleet's own check, only on a free TPU (a held one already makes the node a bad host).
health=none code=
if [ -n "$hc" ] && [ "$state" = clean ]; then
  out=${TMPDIR:-/tmp}/tpucared-health.$$
  if command -v timeout >/dev/null 2>&1; then
    timeout -k 5 "$hc_secs" sh -c "$hc" </dev/null >"$out" 2>&1
  else
    sh -c "$hc" </dev/null >"$out" 2>&1
  fi
  code=$?
  if [ "$code" = 0 ]; then health=ok; else health=failed; fi
  [ "$code" = 0 ] || tail -n 5 "$out" | cut -c1-200 | sed 's/^/TPUCARED_HEALTH_OUT /'
  rm -f "$out"
fi
echo "TPUCARED_CLEANUP state=$state group=$group holders_killed=$((killed))" \
  "lockfile=$lock scope=$scope busy_pids=$left health=$health health_code=$code"
