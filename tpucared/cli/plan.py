"""`tpucared plan`: what the daemon would do now, changing nothing.

One observation (the same lists a tick makes: reads only), the store read through a
read-only connection, and the pure planner. Nothing is written anywhere: no migration (a
database that does not exist yet is planned against as empty, and is not created), no SSH
key generated, no event, no cloud call beyond the lists. Works while the daemon runs.
"""

from __future__ import annotations

import argparse
import asyncio

from sqlalchemy.exc import SQLAlchemyError

from tpucared.cli.config_arg import load
from tpucared.config import Config
from tpucared.core.planning.plan import Plan
from tpucared.core.planning.planner import plan as make_plan
from tpucared.core.planning.snapshot import PlainSnapshot as EmptySnapshot
from tpucared.core.planning.snapshot import PlannerSnapshot
from tpucared.errors import UsageError
from tpucared.gcp import TpuClient
from tpucared.runtime.clock import Clock, SystemClock
from tpucared.runtime.errors import StartupError
from tpucared.runtime.nodes.observer import Observer, zones_to_observe
from tpucared.runtime.startup import token_source
from tpucared.store import Store, database_url
from tpucared.store.engine import sqlite_path


async def read_snapshot(db: str) -> PlannerSnapshot:
    """The store's snapshot, read-only; an empty one when the database file does not exist."""
    path = sqlite_path(database_url(db))
    if path is not None and not path.exists():
        return EmptySnapshot()
    store = Store.open(db, read_only=True)
    try:
        return await store.load_snapshot()
    except SQLAlchemyError as exc:
        raise StartupError(
            f"cannot read the database {db} ({type(exc).__name__}); if it is older than "
            "this tpucared, run `tpucared db upgrade`"
        ) from exc
    finally:
        await store.close()


async def preview(config: Config, *, clock: Clock | None = None) -> Plan:
    clock = clock or SystemClock()
    snapshot = await read_snapshot(config.daemon.db)
    tokens = await asyncio.to_thread(token_source, config)
    async with TpuClient(config.gcp.endpoint, token_source=tokens) as client:
        zones = zones_to_observe(config.fleets, snapshot.nodes.values())
        observations = await Observer(client, config.gcp.project).observe(zones, clock.now())
    return make_plan(
        config.fleets, observations, snapshot, clock.now(), config.policy, config.daemon.owner
    )


def plan_command(args: argparse.Namespace) -> int:
    config = load(args)
    try:
        plan = asyncio.run(preview(config))
    except StartupError as exc:
        raise UsageError(str(exc)) from None
    print(plan.to_json() if args.json else plan.render())
    return 0
