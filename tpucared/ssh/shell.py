"""Building blocks for the POSIX sh scripts run on workers, and for reading their answers.

Owns quoting (`ShellWord`: a value made safe as one shell word, for paths, environment
values and script parameters), the `sh -c` wrapping of a script into one SSH command, and the
parsing of the single marker line each script prints. The scripts themselves are .sh files
read by `shfiles.py`: tpucared/ssh/sh/write_file.sh (`upload.py`) and the launcher's
(tpucared/launch/sh/, given their values by tpucared/launch/scripts.py and provision.py with
these helpers). Nothing here does I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import NewType

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# One shell word that expands to exactly one value, whatever the value holds: the only thing
# that may be spliced into a script. Made by `quote` and `path_expr`.
ShellWord = NewType("ShellWord", str)


class ScriptOutputError(ValueError):
    """A worker's answer lacks the expected marker line or is malformed."""


def quote(value: str) -> ShellWord:
    return ShellWord(shlex.quote(value))


def path_expr(path: str) -> ShellWord:
    """A shell word for a remote path. A leading `~` means the login user's home.

    Relative paths are relative to the login directory (the home), where an SSH command
    starts. shlex.quote alone would turn `~/x` into a directory literally named `~`.
    """
    if not path:
        raise ValueError("empty remote path")
    if "\0" in path:
        raise ValueError(f"NUL byte in remote path {path!r}")
    if path == "~":
        return ShellWord('"$HOME"')
    if path.startswith("~/"):
        rest = path[2:]
        return ShellWord('"$HOME"' + ("/" + quote(rest) if rest else "/"))
    return quote(path)


def optional_path(path: str | None) -> ShellWord:
    """`path_expr(path)`, or the empty word `''` (what the scripts read as "none")."""
    return quote("") if path is None else path_expr(path)


def check_env_name(name: str) -> str:
    if not _ENV_NAME_RE.match(name):
        raise ValueError(f"invalid environment variable name {name!r}")
    return name


def check_env_value(name: str, value: str) -> str:
    if "\0" in value:
        raise ValueError(f"environment variable {name} contains a NUL byte")
    return value


def assignment(name: str, value: str) -> str:
    """`NAME='value'`: safe for any value, including quotes, `$`, backticks and newlines."""
    return f"{check_env_name(name)}={quote(check_env_value(name, value))}"


def export_lines(env: Mapping[str, str]) -> list[str]:
    return [f"export {assignment(name, value)}" for name, value in env.items()]


def env_words(env: Mapping[str, str]) -> list[ShellWord]:
    """One quoted `NAME=value` word per variable, for a script that runs `export "$@"`."""
    return [
        quote(f"{check_env_name(name)}={check_env_value(name, value)}")
        for name, value in env.items()
    ]


def sh_command(script: str) -> str:
    """The SSH command that runs `script` under POSIX sh, whatever the user's login shell."""
    return "sh -c " + quote(script)


def parse_marker(stdout: str, marker: str) -> dict[str, str]:
    """Fields of the last line starting with `marker`, as `key=value` tokens.

    Only the last such line counts: login scripts (`.bashrc`) may print before it.
    """
    for line in reversed(stdout.splitlines()):
        if line.startswith(marker + " "):
            fields: dict[str, str] = {}
            for token in line[len(marker) + 1 :].split():
                key, sep, value = token.partition("=")
                if not sep:
                    raise ScriptOutputError(f"malformed field {token!r} in {line!r}")
                fields[key] = value
            return fields
    tail = stdout.strip()[-200:]
    raise ScriptOutputError(f"no {marker} line in the worker's output: {tail!r}")


def int_field(fields: Mapping[str, str], key: str) -> int | None:
    value = fields.get(key)
    if value is None or value in ("", "-"):
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ScriptOutputError(f"{key}={value!r} is not an integer") from exc
