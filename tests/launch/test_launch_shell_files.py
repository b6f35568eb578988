"""The worker scripts as files: tpucared/launch/sh/*.sh (the launcher's) and
tpucared/ssh/sh/write_file.sh (the upload's) parse, pass shellcheck, are documented, are all
used, ship in the wheel, and get their values exactly (positional parameters).

shellcheck is a hard requirement (.ci/run installs it): these tests fail without it.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpucared.launch import (
    cleanup_script,
    launch_script,
    notice_wait_script,
    probe_script,
    setup_script,
    signal_script,
)
from tpucared.launch.scripts import wrapper_script
from tpucared.ssh import shfiles, write_file_script
from tpucared.ssh.shell import env_words, path_expr, quote

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {"tpucared.launch": "launch", "tpucared.ssh": "ssh"}  # package -> its folder
WHERE = {name: package for package in PACKAGES for name in shfiles.names(package)}
NAMES = sorted(WHERE)
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]
NASTY = 'it\'s "quoted" $HOME `id` $(id) \\ back\nnew line; rm -rf / # * ? [a] ~'
VALUES = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=30)


def shellcheck() -> str:
    path = shutil.which("shellcheck")
    if path is None:
        pytest.fail("shellcheck is not installed (apt-get install shellcheck; see .ci/run)")
    return path


def sh_dir(name: str) -> Path:
    return REPO / "tpucared" / PACKAGES[WHERE[name]] / shfiles.FOLDER


def body(name: str) -> str:
    return shfiles.body(name, WHERE[name])


def header(name: str) -> str:
    text = shfiles.read(name, WHERE[name])
    return text[: len(text) - len(body(name))]


def built_scripts() -> dict[str, str]:
    """Every script the builders make, with values that exercise every parameter."""
    env = {"TPUCARED_WORKER": "0", "FOO": NASTY}
    return {
        "launch": launch_script("~/runs/a b", NASTY, env, "~/.tpucared/secrets", workdir="~/w"),
        "launch-plain": launch_script("/tmp/x", "true", {}),
        "run": wrapper_script(NASTY, env, "~/.tpucared/secrets", "~/w d"),
        "run-plain": wrapper_script("true", {}, None, None),
        "probe": probe_script("runs/it's"),
        "cleanup": cleanup_script("~/r", device_patterns=["/dev/accel*", "/tmp/o'k*"]),
        "cleanup-no-run": cleanup_script(None),
        "setup": setup_script("https://example.com/r.git", "v1", NASTY, "~/src", env=env),
        "setup-no-repo": setup_script(None, None, None, "/tmp/w"),
        "write": write_file_script("~/a/b's", mode=0o600, size=3),
        "notice": notice_wait_script("runs/it's", "notice", 600),
        "signal": signal_script("runs/it's", "USR1"),
        "run-no-watcher": wrapper_script("true", {}, None, None, stop_signal=None),
    }


def test_the_package_ships_the_scripts() -> None:
    dirs = {sh_dir(name) for name in NAMES}
    assert sorted(p.stem for d in dirs for p in d.glob("*.sh")) == NAMES
    assert {"cleanup", "launch", "lib", "probe", "run", "setup", "write_file"} <= set(NAMES)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", NAMES)
def test_every_file_parses(shell: str, name: str) -> None:
    done = subprocess.run(
        [shell, "-n", sh_dir(name) / f"{name}.sh"], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.parametrize("name", NAMES)
def test_every_file_passes_shellcheck(name: str) -> None:
    done = subprocess.run(
        [shellcheck(), "--norc", f"{name}.sh"],
        cwd=sh_dir(name),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", list(built_scripts()))
def test_every_built_script_passes_shellcheck(name: str) -> None:
    # SC2016 ("expressions don't expand in single quotes"): the quoted values are meant to be
    # literal; nothing else is excused in what the workers actually run.
    done = subprocess.run(
        [shellcheck(), "--norc", "--shell=sh", "--exclude=SC2016", "-"],
        input=built_scripts()[name],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", NAMES)
def test_every_file_opens_with_its_documentation(name: str) -> None:
    block = header(name)
    assert block.startswith(f"# {name}.sh: "), block[:80]
    assert "\n# When: " in block
    assert "\n# Expects: " in block
    assert "# shellcheck shell=sh\n" in block  # the dialect the workers run: POSIX sh
    assert not body(name).startswith("#")


@pytest.mark.parametrize("name", NAMES)
def test_no_file_is_an_orphan(name: str) -> None:
    # Each file's body reaches a worker through some builder.
    assert any(body(name) in script for script in built_scripts().values())


def test_scripts_are_read_once() -> None:
    shfiles.read.cache_clear()
    shfiles.body.cache_clear()
    built_scripts()
    built_scripts()
    info = shfiles.read.cache_info()
    assert info.currsize == len(NAMES)
    assert info.misses == len(NAMES)


def test_wheel_carries_every_file() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["tpucared"]
    for name in NAMES:
        path = f"{PACKAGES[WHERE[name]]}/sh/{name}.sh"
        assert any(fnmatch.fnmatch(path, g) for g in globs), (path, globs)


def test_script_is_parameters_then_lib_then_body() -> None:
    script = probe_script("/r")
    assert script == "set -- \\\n  /r\n" + body("lib") + body("probe")
    assert shfiles.set_args([]) == "set --\n"


def positional(shell: str, script: str, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run(
        [shell, "-c", script + 'for a; do printf "%s\\0" "$a"; done\n'],
        capture_output=True,
        env=env,
        check=True,
    )
    return done.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("shell", SHELLS)
@settings(max_examples=40, deadline=None)
@given(values=st.lists(VALUES, max_size=4))
def test_parameters_arrive_exactly(shell: str, values: list[str]) -> None:
    script = shfiles.set_args([quote(v) for v in values])
    assert positional(shell, script) == values


@pytest.mark.parametrize("shell", SHELLS)
def test_path_parameters_expand_the_login_home_only(shell: str) -> None:
    paths = ["~", "~/a b", "/abs", "rel/x", "~user/x", "a'b $c*"]
    script = shfiles.set_args([path_expr(p) for p in paths])
    assert positional(shell, script, env={"HOME": "/home/w"}) == [
        "/home/w",
        "/home/w/a b",
        "/abs",
        "rel/x",
        "~user/x",
        "a'b $c*",
    ]


@pytest.mark.parametrize("shell", SHELLS)
@settings(max_examples=40, deadline=None)
@given(
    env=st.dictionaries(st.from_regex(r"V_[A-Za-z0-9_]{0,10}", fullmatch=True), VALUES, max_size=4)
)
def test_environment_words_export_exactly(shell: str, env: dict[str, str]) -> None:
    # What run.sh and setup.sh do with their trailing NAME=value parameters.
    names = sorted(env)
    script = (
        shfiles.set_args(env_words(env))
        + '[ "$#" -eq 0 ] || export "$@"\n'
        + "".join(f'printf "%s\\0" "${n}"\n' for n in names)
        + "env -0\n"
    )
    path = {"PATH": os.environ["PATH"]}
    out = subprocess.run([shell, "-c", script], capture_output=True, env=path, check=True).stdout
    *values, exported = out.decode().split("\0", len(names))
    assert values == [env[n] for n in names]
    seen = dict(item.split("=", 1) for item in exported.split("\0") if item)
    assert {n: seen.get(n) for n in names} == env


def test_environment_words_reject_what_cannot_be_exported() -> None:
    with pytest.raises(ValueError, match="invalid environment variable name"):
        env_words({"A-B": "1"})
    with pytest.raises(ValueError, match="NUL"):
        env_words({"A": "x\0y"})
