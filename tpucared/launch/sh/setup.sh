# setup.sh: brings a working directory to a ref of a git repository, then runs the user's
# setup command there.
#
# First run: `git clone` into a temporary name, renamed into place only when complete (an
# interrupted clone never looks like a checkout). Later runs: fetch, then check out the ref
# detached, resetting tracked files; untracked files (data, checkpoints) are kept. The ref may
# be a branch, a tag or a commit; '' means the remote's default branch. Without a repository,
# the working directory is just created. Safe to run again after a crash.
#
# When: once per node incarnation, before the workload: in the foreground as one `sh -c`
#   command, or inside the workload's command (tpucared/launch/layout.py) for long setups.
#   Built by `provision.setup_script`.
# Expects: $1 the repository URL or '' for none, $2 the ref or '', $3 the setup command or ''
#   (run by bash when the worker has it, else sh), $4 the working directory, then NAME=value
#   words to export first.
# Prints: TPUCARED_SETUP state=done commit=<sha, or none without a repository>.
#
# shellcheck shell=sh
set -eu
tpucared_repo=$1 tpucared_ref=$2 tpucared_setup=$3 tpucared_workdir=$4
shift 4
export GIT_TERMINAL_PROMPT=0
# Exports the NAME=value words themselves (export alone would list the environment).
# shellcheck disable=SC2163
[ "$#" -eq 0 ] || export "$@"
# bash when present, as a command written for `gcloud ... ssh --command` expects
# (`source venv/bin/activate && ...`); plain sh otherwise.
if command -v bash >/dev/null 2>&1; then tpucared_shell='bash'; else tpucared_shell='sh'; fi
wd=$tpucared_workdir
if [ -n "$tpucared_repo" ]; then
  command -v git >/dev/null 2>&1 || { echo "git is not installed on this worker" >&2; exit 1; }
  repo=$tpucared_repo
  ref=$tpucared_ref
  if [ -d "$wd/.git" ]; then
    git -C "$wd" remote set-url origin "$repo"
    git -C "$wd" fetch --quiet --force --tags --prune origin '+refs/heads/*:refs/remotes/origin/*'
  else
    if [ -e "$wd" ]; then echo "$wd exists and is not a git checkout" >&2; exit 1; fi
    mkdir -p -- "$(dirname -- "$wd")"
    rm -rf -- "$wd.tpucared-clone"
    git clone --quiet --no-checkout -- "$repo" "$wd.tpucared-clone"
    mv -- "$wd.tpucared-clone" "$wd"
  fi
  cd -- "$wd"
  # Remote branches first: a local branch of the same name (made by clone) may be stale.
  if [ -z "$ref" ]; then
    target=refs/remotes/origin/HEAD
    git rev-parse -q --verify "$target" >/dev/null || git remote set-head origin --auto >/dev/null
  elif git rev-parse -q --verify "refs/remotes/origin/$ref^{commit}" >/dev/null; then
    target="refs/remotes/origin/$ref"
  elif git rev-parse -q --verify "$ref^{commit}" >/dev/null; then
    target=$ref
  else
    git fetch --quiet --force origin "$ref"
    target=FETCH_HEAD
  fi
  git checkout --quiet --force --detach "$target"
  commit=$(git rev-parse HEAD)
else
  mkdir -p -- "$wd"
  cd -- "$wd"
  commit=none
fi
if [ -n "$tpucared_setup" ]; then "$tpucared_shell" -c "$tpucared_setup"; fi
echo "TPUCARED_SETUP state=done commit=$commit"
