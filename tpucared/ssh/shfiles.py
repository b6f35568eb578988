"""Worker scripts as package data: the .sh files of a package's `sh/` folder, and how values
reach them.

Owns reading those files from the installed package (`importlib.resources`, once per file)
and assembling one of them into a self-contained script, which is what the workers get: an
SSH command runs it as `sh -c SCRIPT` (`shell.sh_command`), and a script may write another to
a file. Assembly is three parts, none of which interpolates a value into code:

    set -- WORD...   the script's positional parameters, each a `shell.ShellWord` (quoted by
                     `shell.quote` or `shell.path_expr`), so a value is never parsed as code
    lib.sh           the package's shared functions, for the scripts that call them
    NAME.sh          the script's body, which reads its parameters as $1, $2...

Each file opens with a comment block (what it does, when it runs, what it expects), for
readers and shellcheck; that block is left out of what is sent. This package's own folder,
tpucared/ssh/sh/, holds only the transport's script (write_file.sh, for `upload`); the
launcher's scripts live in tpucared/launch/sh/ and are loaded by tpucared/launch/shfiles.py
through these functions.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources

from tpucared.ssh.shell import ShellWord

PACKAGE = "tpucared.ssh"
FOLDER = "sh"
LIB = "lib"


@functools.cache
def read(name: str, package: str = PACKAGE) -> str:
    """The whole text of `sh/<name>.sh` of `package`, read once."""
    return (resources.files(package) / FOLDER / f"{name}.sh").read_text(encoding="utf-8")


@functools.cache
def body(name: str, package: str = PACKAGE) -> str:
    """`sh/<name>.sh` without its leading comment block (and the blank lines in it)."""
    lines = read(name, package).splitlines(keepends=True)
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].startswith("#")):
        start += 1
    if start == len(lines):
        raise ValueError(f"{name}.sh has no commands")
    return "".join(lines[start:])


def names(package: str = PACKAGE) -> list[str]:
    """Every script `package` ships, by name (`write_file` for sh/write_file.sh)."""
    folder = resources.files(package) / FOLDER
    return sorted(e.name.removesuffix(".sh") for e in folder.iterdir() if e.name.endswith(".sh"))


def set_args(args: Sequence[ShellWord]) -> str:
    """`set -- WORD...`, one word per line: gives the script its $1, $2..."""
    return "".join(["set --", *(f" \\\n  {word}" for word in args), "\n"])


def script(
    name: str, args: Sequence[ShellWord], *, lib: bool = False, package: str = PACKAGE
) -> str:
    """`sh/<name>.sh` of `package` ready to run: its parameters `args`, the package's lib.sh
    when `lib`, its body."""
    return set_args(args) + (body(LIB, package) if lib else "") + body(name, package)
