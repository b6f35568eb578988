"""The database as the commands that only read it open it: `status`, `events`, `logs`, `exec`
and `cp`.

They never create, migrate or write it. A missing file is a `UsageError` naming it (nothing is
created); a file they must not read (not SQLite, corrupt, someone else's, without our schema,
at another revision: `store.migrate.check_readable`, read-only) is the store's one-line
`DatabaseError`; and what SQLite says half-way through a read (a corrupt page the check did
not reach: it skips the `quick_check` of every page, to stay quick) is turned into the same
one line (`store.engine.database_error`). The CLI prints either as `tpucared: <line>` and
exits 2, never with a traceback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import OperationalError

from tpucared.errors import UsageError
from tpucared.inspect.dbpath import missing_file
from tpucared.store import Store
from tpucared.store.engine import (
    DEFAULT_BUSY_TIMEOUT_MS,
    database_url,
    shown,
    store_error,
)

T = TypeVar("T")


def require_file(setting: str) -> None:
    """A missing SQLite file is refused here: a read-only open must not create it."""
    missing = missing_file(setting)
    if missing is not None:
        raise UsageError(
            f"no database at {missing}: the daemon creates it on its first start "
            "(or pass --db, -c FILE, or set TPUCARED_DB)"
        )


async def reading(setting: str, read: Callable[[Store], Awaitable[T]]) -> T:
    """`read` over the database opened read-only, after it was checked; its errors as one
    line (see the module's docstring)."""
    # Alembic is imported only by commands that read the schema's revision.
    from tpucared.store.migrate import check_readable

    require_file(setting)
    try:
        await check_readable(setting)
        async with Store.open(setting, read_only=True) as store:
            return await read(store)
    except OperationalError as exc:
        raise _one_line(setting, exc) from None
    except Exception as exc:
        error = _database_error(setting, exc)
        if error is None:
            raise
        raise error from None


def _database_error(setting: str, exc: BaseException) -> Exception | None:
    return store_error(exc, database_url(setting), DEFAULT_BUSY_TIMEOUT_MS)


def _one_line(setting: str, exc: OperationalError) -> BaseException:
    error = _database_error(setting, exc)
    if error is not None:
        return error
    # e.g. no permission on the -shm file: a WAL reader needs write access to it.
    # SystemExit with a message: printed to stderr, exit code 1.
    reason = str(exc.orig) if exc.orig is not None else str(exc)
    return SystemExit(f"tpucared: cannot read {shown(setting)}: {reason}")
