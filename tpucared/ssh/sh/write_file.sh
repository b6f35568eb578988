# write_file.sh: writes its stdin to a file on the worker, atomically, with a given mode.
#
# Created under umask 077 (a secret is never readable by others, not even between write and
# chmod), size-checked so a connection dropped mid-transfer cannot install a truncated file,
# then renamed into place. Missing parent directories are created 0700.
#
# When: for every file sent to workers (`tpucared cp`, the workload's files, the secrets
#   file); sent as one `sh -c` command by `provision.write_file_script`, content on stdin.
# Expects: $1 the destination path, $2 the expected size in bytes, $3 the mode (octal, e.g.
#   0600); the content on stdin.
# Prints: TPUCARED_WRITE state=ok bytes=N; on a short read, a message on stderr and exit 1.
#
# shellcheck shell=sh
set -eu
f=$1 size=$2 mode=$3
umask 077
d=$(dirname -- "$f")
mkdir -p -- "$d"
t="$d/.$(basename -- "$f").tpucared.$$"
trap 'rm -f -- "$t"' EXIT
cat > "$t"
n=$(wc -c < "$t")
if [ "$((n))" -ne "$size" ]; then
  echo "received $((n)) of $size bytes for $f" >&2
  exit 1
fi
chmod "$mode" -- "$t"
mv -f -- "$t" "$f"
trap - EXIT
echo "TPUCARED_WRITE state=ok bytes=$((n))"
