"""tpucared's memory: a SQL database (SQLite by default) that survives `kill -9` at any instant.

The runtime records intent here before acting and outcomes after, and rebuilds its view from here
after a restart; the CLI's read-only commands and people with `sqlite3` read it directly
(docs/inspecting.md). Modules:

- `engine`: URL from the `daemon.db` setting, the async engine, SQLite pragmas and transactions.
- `models` / `types`: the schema (typed declarative tables) and its portable column types.
- `migrate`: Alembic upgrades at start-up, safe when processes race; drift check for CI.
  (Not imported here: read-only commands need not load Alembic.)
- `repository`: `Store`, the handle: `read()` / `write()` transactions, one-call reads.
- `groups`: `Store.grouped(work)`, many tasks' small writes committed in one transaction.
- `statements`: statements built once and run with parameters (the compare-and-set UPDATE).
- `reads` / `writes`: the queries (`Reader`) and the changes (`Tx`), returning core records;
  `Tx.apply_each` applies many small writes, each undone alone if refused.
- `ledger_reads`: the badput ledger's read (`Reader.ledger`, for `tpucared goodput`).
- `snapshot`: `Snapshot` (the planner's input) and the status read models.
- `errors`: `StaleWrite` (lost compare-and-set), `IllegalTransition`, `NotFound`, and
  `DatabaseError` (a file tpucared must not use: broken, newer, someone else's, locked).
- `lock`: `WriterLock`, the daemon's single-writer lock next to a SQLite file (`state.db.lock`).
- `lease`: the leader lease's row (take, renew, release by compare-and-set on its epoch) and
  `Fence`, which `Store.write()` checks first in a daemon's store (`LeaseLost`).
"""

from tpucared.store.engine import database_url, make_engine
from tpucared.store.errors import (
    AttemptRunning,
    CasConflict,
    DatabaseError,
    IllegalTransition,
    LiveIncarnationExists,
    NotFound,
    StaleWrite,
    StoreError,
    StoreUnavailable,
)
from tpucared.store.reads import Reader
from tpucared.store.repository import Store
from tpucared.store.snapshot import FleetStatus, SliceStatus, SlotKey, SlotStatus, Snapshot
from tpucared.store.tx import Applied, Tx
from tpucared.store.write_base import KEEP
from tpucared.store.write_nodes import CloudWrites

__all__ = [
    "KEEP",
    "Applied",
    "AttemptRunning",
    "CasConflict",
    "CloudWrites",
    "DatabaseError",
    "FleetStatus",
    "IllegalTransition",
    "LiveIncarnationExists",
    "NotFound",
    "Reader",
    "SliceStatus",
    "SlotKey",
    "SlotStatus",
    "Snapshot",
    "StaleWrite",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "Tx",
    "database_url",
    "make_engine",
]
