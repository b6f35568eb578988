"""What one tpucared process holds while it works on a fleet, opened in one place.

`tpucared run`, `tpucared down` and `tpucared up` (and the demo and babysit, through them) all
open their resources with `open_resources`: for the daemon (`single_writer`) first the
database's single-writer lock (`tpucared.store.lock`; `down` and `up` take it only for a
migration, see `migrated_beside_a_daemon`), then the database migrated to head, then the store,
then, for the commands that talk to the cloud, the credentials and a Cloud port per cloud API
tpucared speaks (`Resources.connect`, runtime/clouds.py). Everything opened is registered on one
`contextlib.AsyncExitStack` and closed in reverse order on the way out, whatever happened; a
command adds its own resources (the HTTP server, the workload runner) to the same stack.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import structlog

from tpucared.config import Config
from tpucared.ports.cloud import Cloud, TokenSource
from tpucared.runtime.clock import Clock, SystemClock
from tpucared.runtime.clouds import connect_clouds
from tpucared.runtime.startup import token_source
from tpucared.store import Store
from tpucared.store.errors import DatabaseError
from tpucared.store.lock import LockHeld, WriterLock

log = structlog.get_logger(__name__)

RequestHook = Callable[[str, str, float], None]  # (call, status, seconds), e.g. /metrics


@dataclass
class Resources:
    """The open store (and, once connected, the clouds' ports) of one command's run."""

    config: Config
    clock: Clock
    store: Store
    stack: AsyncExitStack
    revision: str
    clouds: dict[str, Cloud] | None = None  # by cloud API (`FleetSpec.api`, a node's `api`)

    async def connect(
        self, *, on_request: RequestHook | None = None, tokens: TokenSource | None = None
    ) -> dict[str, Cloud]:
        """Build the credentials (off the loop: ADC may ask the metadata server; `tokens`, if
        the command built them before opening anything) and the clouds' ports; a bad
        `[gcp] credentials` is a StartupError."""
        if tokens is None:
            tokens = await credentials(self.config)
        clouds = connect_clouds(self.config, tokens, on_request=on_request)
        for cloud in clouds.values():
            self.stack.push_async_callback(cloud.aclose)
        self.clouds = clouds
        return clouds


async def credentials(config: Config) -> TokenSource:
    """`[gcp] credentials`, built off the loop; a bad one is a StartupError. `run`, `down` and
    `up` call it before `open_resources`, so bad credentials leave no database and no key behind."""
    return await asyncio.to_thread(token_source, config)


@asynccontextmanager
async def open_resources(
    config: Config, *, clock: Clock | None = None, single_writer: bool = False
) -> AsyncIterator[Resources]:
    """Migrate the database, open the store; close all that was opened on the way out.

    `single_writer` (the daemon): first take the database's writer lock, before anything
    touches the database; a second daemon stops there (`LockHeld`). It is on the stack first,
    so it is released last, after everything else has closed. `down` and `up` run beside a
    daemon and do not hold it (see `migrated_beside_a_daemon`)."""
    from tpucared.store.migrate import upgrade_to_head  # Alembic: only commands that migrate

    async with AsyncExitStack() as stack:
        if single_writer:
            stack.enter_context(WriterLock(config.daemon.db))
            revision = await upgrade_to_head(config.daemon.db)
        else:
            revision = await migrated_beside_a_daemon(config.daemon.db)
        store = Store.open(config.daemon.db)
        stack.push_async_callback(store.close)
        yield Resources(config, clock or SystemClock(), store, stack, revision)


async def migrated_beside_a_daemon(db: str) -> str:
    """The migration of `down` and `up`, which may run while a daemon holds the database.

    A database already at this tpucared's head needs no migration: nothing is locked, and a
    daemon running on it goes on undisturbed. One that needs migrating (a new file, an older
    schema) is migrated under the writer lock, as `tpucared db upgrade` does: a daemon started
    meanwhile waits its turn by refusing to start, and a daemon already running (an older
    tpucared, on its older schema) is never migrated beneath; the command is refused in one
    line instead. A file that cannot be used is refused by `upgrade_to_head`, as for `run`."""
    from tpucared.store.migrate import check_readable, head_revision, upgrade_to_head

    try:
        await check_readable(db)  # read-only; at head, or a DatabaseError saying why not
    except DatabaseError:
        try:
            with WriterLock(db):
                return await upgrade_to_head(db)
        except LockHeld as held:
            raise DatabaseError(
                f"{held}, and its schema is not this tpucared's (head {head_revision()}): "
                "a migration is never made beneath a running daemon; use the daemon's "
                "tpucared version, or stop the daemon first"
            ) from None
    return await upgrade_to_head(db)  # a no-op at head, after the same checks as `run`'s
