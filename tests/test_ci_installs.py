"""CI installs what the tests and benchmarks run, and the README lists the same packages.

`.ci/run`'s `DEB_PACKAGES` line is the one list of Debian packages. This scans tests/ and
bench/ for the external commands they start (subprocess / asyncio / shutil.which arguments,
constants naming a binary, absolute /usr/bin and /usr/sbin paths) and fails, never skips,
when a command is not in `PACKAGE_OF` below or its package is not installed by `.ci/run`.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI_RUN = ROOT / ".ci" / "run"
README = ROOT / "README.md"
SCANNED = ("tests", "bench")

# Every external command the tests and benchmarks start -> the Debian package it comes from.
PACKAGE_OF = {
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "parallel-ssh": "pssh",
    "sqlite3": "sqlite3",
    "git": "git",
    "systemd-analyze": "systemd",
    "shellcheck": "shellcheck",
    "chattr": "e2fsprogs",
    "promtool": "prometheus",
    "useradd": "passwd",
    "userdel": "passwd",
    "dash": "dash",
    "bash": "bash",
    "sh": "dash",
    "sleep": "coreutils",
    "setpriv": "util-linux",
    "runuser": "util-linux",
    "initdb": "postgresql",
    "pg_ctl": "postgresql",
    "psql": "postgresql",
    "podman": "podman",
    "runc": "runc",
    "mmdebstrap": "mmdebstrap",
    "mount": "mount",  # a small tmpfs that fills up (tests/runtime/test_database_outage.py)
    "umount": "mount",
    "dd": "coreutils",
    "chromium": "chromium",  # the page's browser test (tests/runtime/page/test_page_browser.py)
    "chromedriver": "chromium-driver",
}

# Essential: yes on Debian, present on every installation; .ci/run need not name them.
ESSENTIAL = {"coreutils", "dash", "bash", "util-linux"}

# subprocess.run("cmd" / ["cmd", ...] / CONSTANT, ...), create_subprocess_exec("cmd", ...),
# shutil.which("cmd"), across lines; a bare run/Popen/spawn(...) only with an argv list (a
# bare `run("downgrade")` or `spawn("reader")` is a helper's argument, not a command).
_CALL = (
    r"(?:\b(?:subprocess\.(?:run|Popen|check_output|check_call|call)|create_subprocess_exec"
    r"|shutil\.which|_command_output)\(\s*\[?|\b(?:run|Popen|spawn|check_output)\(\s*\[)"
)
_CALL_LITERAL = re.compile(_CALL + r'\s*"([A-Za-z0-9_./+-]+)"')
_CALL_CONSTANT = re.compile(_CALL + r"\s*([A-Z][A-Z0-9_]*)\b")
# argv = ["cmd", ...]
_ARGV = re.compile(r'\b(?:argv|cmd|command)\s*=\s*\[\s*"([A-Za-z0-9_./+-]+)"')
# ("dash", "bash") if shutil.which(s)
_WHICH_TUPLE = re.compile(r'\(((?:\s*"[A-Za-z0-9_.+-]+",?)+)\s*\)\s*if\s+shutil\.which\(')
_BIN_PATH = re.compile(r'"/(?:usr/)?s?bin/([A-Za-z0-9_.+-]+)"')


def _constants(text: str) -> dict[str, str]:
    return dict(re.findall(r'^([A-Z][A-Z0-9_]*)\s*=\s*"([^"]+)"\s*$', text, re.MULTILINE))


def commands_in(text: str, imported: dict[str, str] | None = None) -> set[str]:
    """The external commands one source file starts. `imported`: constants defined in other
    scanned files (a package keeps `PARALLEL_SSH = "parallel-ssh"` in its settings module)."""
    found = set(_CALL_LITERAL.findall(text)) | set(_ARGV.findall(text))
    constants = {**(imported or {}), **_constants(text)}
    found |= {constants[name] for name in _CALL_CONSTANT.findall(text) if name in constants}
    for group in _WHICH_TUPLE.findall(text):
        found |= set(re.findall(r'"([^"]+)"', group))
    found |= set(_BIN_PATH.findall(text))
    return {Path(c).name for c in found if not c.startswith("-")}


def scanned_commands() -> dict[str, list[str]]:
    """command -> the files that start it, over tests/ and bench/."""
    where: dict[str, list[str]] = {}
    paths = [
        path
        for top in SCANNED
        for path in sorted((ROOT / top).rglob("*.py"))
        if path != Path(__file__).resolve()  # its own examples are not commands
    ]
    texts = {path: path.read_text(encoding="utf-8") for path in paths}
    constants: dict[str, str] = {}
    for text in texts.values():
        constants.update(_constants(text))
    for path, text in texts.items():
        for command in commands_in(text, constants):
            where.setdefault(command, []).append(str(path.relative_to(ROOT)))
    return where


def ci_packages() -> list[str]:
    match = re.search(r'^DEB_PACKAGES="([^"]*)"$', CI_RUN.read_text(), re.MULTILINE)
    assert match, '.ci/run has no DEB_PACKAGES="..." line'
    return match.group(1).split()


def readme_packages() -> list[str]:
    lines = [
        line for line in README.read_text().splitlines() if line.startswith("apt-get install ")
    ]
    assert len(lines) == 1, f"README.md: expected one `apt-get install` line, found {lines}"
    return [w for w in shlex.split(lines[0])[2:] if not w.startswith("-")]


def test_the_scan_finds_the_commands_it_knows_of() -> None:
    """A guard on the scanner itself: these are started today, in these shapes."""
    found = scanned_commands()
    for command in ("sshd", "ssh", "ssh-keygen", "parallel-ssh", "sqlite3", "git",
                    "systemd-analyze", "shellcheck", "chattr", "dash", "bash",
                    "initdb", "pg_ctl", "psql", "podman", "runc", "mmdebstrap"):  # fmt: skip
        assert command in found, f"the scan no longer finds {command}"
    assert commands_in('subprocess.run(\n    [\n        "foo",\n        "-x",') == {"foo"}
    assert commands_in('X = "/usr/sbin/bar"\nPopen([X, "-D"])') == {"bar"}
    assert commands_in('S = [s for s in ("a", "b") if shutil.which(s)]') == {"a", "b"}


def test_every_command_the_tests_run_is_installed_by_ci() -> None:
    installed = set(ci_packages()) | ESSENTIAL
    problems = []
    for command, files in sorted(scanned_commands().items()):
        package = PACKAGE_OF.get(command)
        if package is None:
            problems.append(
                f"{command} (run by {', '.join(files)}): not in PACKAGE_OF of "
                "tests/test_ci_installs.py; add it with its Debian package"
            )
        elif package not in installed:
            problems.append(
                f"{command} (run by {', '.join(files)}): its package {package} is not in "
                ".ci/run's DEB_PACKAGES"
            )
    assert not problems, "\n".join(problems)


def test_ci_installs_nothing_the_table_does_not_explain() -> None:
    needed = set(PACKAGE_OF.values())
    assert [p for p in ci_packages() if p not in needed] == []


def test_the_readme_lists_the_packages_ci_installs() -> None:
    assert readme_packages() == ci_packages()
