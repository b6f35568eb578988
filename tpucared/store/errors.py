"""The errors the store raises, so callers can tell a lost race from a bug.

- `StaleWrite` (alias `CasConflict`): a compare-and-set found a different state than the caller
  read. Nothing was written; re-read (`Store.load_snapshot`) and decide again.
- `IllegalTransition` (re-exported from `tpucared.core.model.lifecycle`): the edge is not in the
  lifecycle table at all. A bug in the caller, never retried.
- `LeaseLost`: this process no longer leads (store/lease.py): nothing was written, and the
  daemon stands by. Never retried by the caller.
- `NotFound`: the record the write refers to does not exist.
- `DatabaseError`: the database file cannot be used as it is (not a database, corrupt, newer
  than this tpucared, someone else's, read-only, locked): one line naming the file and what to
  do. The CLI prints it as `tpucared: <message>` and exits 2.
- `StoreUnavailable`: a transaction of a running process failed because the database went
  away or cannot take a write just now (the PostgreSQL server stopped or restarted, the
  connection dropped, the SQLite disk is full): the same one line as `DatabaseError` names the
  cause. Nothing of the transaction was written, or (a failed commit) whether it landed is
  unknown; the daemon stands by until the database answers again (runtime/terms.py).
"""

from __future__ import annotations

from tpucared.core.model.lifecycle import IllegalTransition

__all__ = [
    "AttemptRunning",
    "CasConflict",
    "DatabaseError",
    "IllegalTransition",
    "LeaseLost",
    "LiveIncarnationExists",
    "NotFound",
    "StaleWrite",
    "StoreError",
    "StoreUnavailable",
]


class StoreError(Exception):
    """Base of the store's own errors."""


class DatabaseError(StoreError):
    """The database file is not one tpucared can safely use; nothing was written to it."""


class NotFound(StoreError, LookupError):
    def __init__(self, what: str) -> None:
        super().__init__(f"{what} not found")
        self.what = what


class StaleWrite(StoreError):
    """A compare-and-set lost: `what` was `actual`, not the `expected` the caller read."""

    def __init__(self, what: str, expected: object, actual: object) -> None:
        super().__init__(f"stale write to {what}: expected {expected!r}, found {actual!r}")
        self.what = what
        self.expected = expected
        self.actual = actual


CasConflict = StaleWrite


class LiveIncarnationExists(StaleWrite):
    """`request_node` for a slot that still has a live incarnation (`actual` is its id)."""


class AttemptRunning(StaleWrite):
    """`start_attempt` for a slot whose previous attempt has not finished (`actual` is its id)."""


class LeaseLost(StoreError):
    """This process no longer holds the leader lease (another took it, or its term ran out):
    the write or cloud call it guarded must not happen, and the daemon stands by. Not a
    `StaleWrite`: nobody may catch it and carry on with the next action."""


class StoreUnavailable(StoreError):
    """The database did not answer or refused a write just now (module docstring): weather,
    not a bug. The daemon acts on nothing it cannot record, and stands by until it answers."""
