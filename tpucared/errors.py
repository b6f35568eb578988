"""Errors every command shares. `UsageError`: bad input a person must fix (a config problem,
a bad argument); the CLI prints it as `tpucared: <message>` and exits 2, with no traceback."""


class UsageError(Exception):
    """Bad input from the user: printed as one line per problem, exit status 2."""
