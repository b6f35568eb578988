# lib.sh: shell functions shared by launch.sh, run.sh, probe.sh and cleanup.sh.
#
# When: never alone. The loader (tpucared/launch/shfiles.py) puts it between a script's
#   positional parameters and its body, so the functions exist before the body runs.
# Expects: nothing at definition time; run_alive reads $rd, the run directory.
# Defines (they read /proc with the `read` builtin only, so scanning every process costs no
#   fork):
#   proc_stat FILE  sets _st (state), _pg (process group), _start (start time in ticks).
#   boot_id         sets _boot.
#   run_alive       the run's wrapper is alive (not a zombie: an orphan is only reaped if PID 1
#                   does it, which is not true in every container), same boot, same start time.
#                   Sets _pid; sets _why to no-run / died / rebooted when it returns false.
#   group_alive PGID  some non-zombie process is in that process group.
#   metadata_get URL OUT HEADERS  one metadata server request (run.sh's notice watcher,
#                   notice_wait.sh); run in the background or a subshell: it execs the client.
#
# shellcheck shell=sh
proc_stat() {
  _st="" _pg="" _start="" _line=""
  { read -r _line < "$1"; } 2>/dev/null || return 1
  set -f
  # Split on purpose: the fields after the command name (which may hold spaces), globbing off.
  # shellcheck disable=SC2086
  set -- ${_line##*) }
  set +f
  _st=$1 _pg=$3 _start=${20}
}
boot_id() {
  _boot=
  { read -r _boot < /proc/sys/kernel/random/boot_id; } 2>/dev/null || _boot=unknown
}
# $rd is the run directory, set by the script this file is joined to.
# shellcheck disable=SC2154
run_alive() {
  _pid="" _why=no-run
  [ -s "$rd/pid" ] || return 1
  read -r _pid < "$rd/pid" || return 1
  case $_pid in ''|*[!0-9]*) return 1;; esac
  _why=died
  if [ ! -r /proc/self/stat ]; then kill -0 "$_pid" 2>/dev/null; return; fi
  if [ -s "$rd/ident" ]; then
    read -r _iboot _istart < "$rd/ident"
    boot_id
    if [ "$_iboot" != "$_boot" ]; then _why=rebooted; return 1; fi
  else
    _istart=
  fi
  proc_stat "/proc/$_pid/stat" || return 1
  case $_st in Z|X|x) return 1;; esac
  [ -z "$_istart" ] || [ "$_istart" = "$_start" ]
}
group_alive() {
  if [ ! -r /proc/self/stat ]; then kill -0 -- "-$1" 2>/dev/null; return; fi
  for _f in /proc/[0-9]*/stat; do
    proc_stat "$_f" || continue
    [ "$_pg" = "$1" ] || continue
    case $_st in Z|X|x) continue;; esac
    return 0
  done
  return 1
}
# metadata_get URL OUT HEADERS: one metadata server request (curl, else python3); 0 on a 200.
# Only ever run in the background (`&`) or a subshell: it execs the client, so killing the job
# kills it.
metadata_get() {
  if command -v curl >/dev/null 2>&1; then
    exec curl -sf -H 'Metadata-Flavor: Google' -D "$3" -o "$2" "$1"
  elif command -v python3 >/dev/null 2>&1; then
    exec python3 -c 'import sys, urllib.request as u
r = u.urlopen(u.Request(sys.argv[1], headers={"Metadata-Flavor": "Google"}), timeout=3700)
open(sys.argv[3], "w").write("".join(f"{k}: {v}\n" for k, v in r.headers.items()))
open(sys.argv[2], "wb").write(r.read())' "$1" "$2" "$3" 2>/dev/null
  else
    return 2
  fi
}
