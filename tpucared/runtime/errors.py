"""Errors of the runtime layer that the CLI turns into exit codes. Kept free of heavy imports
so that a command failing on its configuration fails fast."""

from __future__ import annotations


class StartupError(Exception):
    """A setting or file a person must fix; the message names it. Exit status 2."""
