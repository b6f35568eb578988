"""The launcher's worker scripts: the .sh files of tpucared/launch/sh/.

launch.sh, run.sh, probe.sh, cleanup.sh, notice_wait.sh, signal.sh, setup.sh, with lib.sh
(the shared /proc functions) put in front of those that call it. Reading and assembling them
is the transport's (tpucared/ssh/shfiles.py: positional parameters, never interpolation);
this module names this package's folder for it. `scripts.py` and `provision.py` give the
scripts their values.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpucared.ssh import shfiles
from tpucared.ssh.shell import ShellWord

PACKAGE = "tpucared.launch"
FOLDER = shfiles.FOLDER


def read(name: str) -> str:
    """The whole text of `sh/<name>.sh`, read from the package once."""
    return shfiles.read(name, PACKAGE)


def body(name: str) -> str:
    """`sh/<name>.sh` without its leading comment block."""
    return shfiles.body(name, PACKAGE)


def names() -> list[str]:
    """Every script the launcher ships, by name (`cleanup` for sh/cleanup.sh)."""
    return shfiles.names(PACKAGE)


def script(name: str, args: Sequence[ShellWord], *, lib: bool = False) -> str:
    """`sh/<name>.sh` ready to run: its parameters `args`, lib.sh when `lib`, its body."""
    return shfiles.script(name, args, lib=lib, package=PACKAGE)
