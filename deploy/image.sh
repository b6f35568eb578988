#!/usr/bin/env bash
# Builds the tpucared image from the repository's Dockerfile with podman: `make image`, or
# `deploy/image.sh [TAG [podman build options...]]` (default localhost/tpucared:latest).
# tests/deploy/ builds with it too, so what deploy/README.md tells a user is what CI builds.
#
# On a machine that cannot pull the Dockerfile's base (python:3.11-slim: no registry reachable),
# it makes a local one: a minimal Debian with python3, pip and venv (mmdebstrap), imported as
# localhost/tpucared-base:bookworm and kept, so later builds skip that step. BASE=image picks
# another base. The host's pip configuration (what `pip config list` shows, PIP_* variables
# included, and SSL_CERT_FILE) is passed into the build, when there is one: pip in the build
# then reaches the package index exactly as pip outside does.
#
# Why these podman flags: `--isolation chroot` because the default OCI isolation needs cgroups
# that a container host like CI's may not offer; `--network host` so pip's index is reached
# as from the host; `--format docker` because the OCI format drops the HEALTHCHECK.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${1:-localhost/tpucared:latest}
shift || true
OFFICIAL_BASE=python:3.11-slim
LOCAL_BASE=localhost/tpucared-base:bookworm
PYTHON=${PYTHON:-python3}

have_image() { podman image exists "$1"; }

pick_base() {
  if [ -n "${BASE:-}" ]; then echo "$BASE"; return; fi
  if have_image "$OFFICIAL_BASE"; then echo "$OFFICIAL_BASE"; return; fi
  if have_image "$LOCAL_BASE"; then echo "$LOCAL_BASE"; return; fi
  if timeout 120 podman pull -q "$OFFICIAL_BASE" >/dev/null 2>&1; then
    echo "$OFFICIAL_BASE"; return
  fi
  echo "cannot pull $OFFICIAL_BASE: making $LOCAL_BASE with mmdebstrap" >&2
  # minbase + what the Dockerfile runs (python, pip wheel, python -m venv, HTTPS to the index).
  mmdebstrap --quiet --variant=minbase \
    --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
    bookworm "$work/base.tar" >&2
  podman import --quiet --change 'CMD ["/bin/bash"]' "$work/base.tar" "$LOCAL_BASE" >/dev/null
  rm -f "$work/base.tar"
  echo "$LOCAL_BASE"
}

# The host's pip settings as one pip.conf (mounted on /etc/pip.conf in the build), and a
# read-only mount of every local path they name (a certificate bundle, constraints, find-links
# directories, the directory holding a file:// index) at the same path. Settings from PIP_* variables (`:env:` in
# `pip config list`) override the files', as they do outside.
pip_mounts=()
pip_config() {
  local conf=$1 listing line key value section name word path
  listing=$("$PYTHON" -m pip config list 2>/dev/null || true)
  declare -A settings=()
  local order=()
  for pass in file env; do
    while IFS= read -r line; do
      [ -n "$line" ] || continue
      key=${line%%=*}
      value=${line#*=}
      value=${value#[\'\"]}
      value=${value%[\'\"]}
      section=${key%%.*}
      name=${key#*.}
      if [ "$section" = ":env:" ]; then
        [ "$pass" = env ] || continue
        section=global
      else
        [ "$pass" = file ] || continue
      fi
      [ -n "${settings[$section.$name]+x}" ] || order+=("$section.$name")
      settings[$section.$name]=$value
    done <<<"$listing"
  done
  if [ -n "${SSL_CERT_FILE:-}" ] && [ -z "${settings[global.cert]+x}" ]; then
    order+=(global.cert)
    settings[global.cert]=$SSL_CERT_FILE
  fi
  [ ${#order[@]} -gt 0 ] || return 1
  local written=""
  for section in $(printf '%s\n' "${order[@]}" | cut -d. -f1 | sort -u); do
    printf '[%s]\n' "$section" >>"$conf"
    for key in "${order[@]}"; do
      [ "${key%%.*}" = "$section" ] || continue
      printf '%s = %s\n' "${key#*.}" "${settings[$key]}" >>"$conf"
      for word in ${settings[$key]}; do
        path=${word#file://}
        case "$path" in /*) ;; *) continue ;; esac
        # A file:// index's pages link to files beside it (../../files/x.whl): its parent.
        case "$word:${key#*.}" in
          file://*:index-url | file://*:extra-index-url) path=$(dirname "${path%/}") ;;
        esac
        [ "$path" != / ] || continue
        [ -e "$path" ] || continue
        case " $written " in *" $path "*) continue ;; esac
        written="$written $path"
        pip_mounts+=(-v "$path:$path:ro")
      done
    done
  done
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
base=$(pick_base)
build_args=(--isolation chroot --network host --format docker --build-arg "BASE=$base")
if pip_config "$work/pip.conf"; then
  chmod 0644 "$work/pip.conf"
  build_args+=(-v "$work/pip.conf:/etc/pip.conf:ro" "${pip_mounts[@]}")
fi

old=$(podman image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
podman build "${build_args[@]}" "$@" -t "$TAG" .
new=$(podman image inspect --format '{{.Id}}' "$TAG")
# A rebuild leaves the previous image untagged: remove it, unless another tag names it or a
# container still uses it.
if [ -n "$old" ] && [ "$old" != "$new" ] &&
  [ "$(podman image inspect --format '{{len .RepoTags}}' "$old" 2>/dev/null)" = 0 ]; then
  podman rmi "$old" >/dev/null 2>&1 || true
fi
echo "built $TAG on $base"
