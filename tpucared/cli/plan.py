"""`tpucared plan`: what the daemon would do now, changing nothing.

One observation (the same lists a tick makes: reads only), the store read through a
read-only connection, and the pure planner. Nothing is written anywhere: no migration (a
database that does not exist yet is planned against as empty, and is not created), no SSH
key generated, no event, no cloud call beyond the lists. Works while the daemon runs.

When no zone could be listed (the endpoint is unreachable, credentials are refused...), the
plan is printed all the same but the command exits 1 with a one-line reason on stderr: a
plan made blind is not "nothing to do".
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from sqlalchemy.exc import SQLAlchemyError

from tpucared.cli.config_arg import load
from tpucared.config import Config
from tpucared.core.model.observed import ZoneObservation
from tpucared.core.planning.planner import plan as make_plan
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.snapshot import PlainSnapshot as EmptySnapshot
from tpucared.core.vocab.snapshot import PlannerSnapshot
from tpucared.errors import UsageError
from tpucared.inspect.fmt import one_line
from tpucared.runtime.clock import Clock, SystemClock
from tpucared.runtime.clouds import CloudMap, connect_clouds
from tpucared.runtime.errors import StartupError
from tpucared.runtime.nodes.observer import Observer, zones_to_observe
from tpucared.runtime.startup import token_source
from tpucared.store import Store, database_url
from tpucared.store.engine import shown, sqlite_path
from tpucared.store.snapshot import error_text


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
            f"cannot read the database {shown(db)} ({type(exc).__name__}); if it is older than "
            "this tpucared, run `tpucared db upgrade`"
        ) from exc
    finally:
        await store.close()


async def preview(config: Config, *, clock: Clock | None = None) -> Plan:
    return (await observe_and_plan(config, clock=clock))[1]


# How long `tpucared plan` waits for one zone's list, retries included.
PLAN_LIST_DEADLINE_S = 30.0


async def observe_and_plan(
    config: Config, *, clock: Clock | None = None
) -> tuple[tuple[ZoneObservation, ...], Plan]:
    clock = clock or SystemClock()
    snapshot = await read_snapshot(config.daemon.db)
    tokens = await asyncio.to_thread(token_source, config)
    clouds = connect_clouds(config, tokens)
    try:
        zones = zones_to_observe(config.fleets, snapshot.nodes.values())
        # A one-shot command may wait for a slow zone longer than a tick would.
        observer = Observer(
            CloudMap(clouds, config.fleets), config.gcp.project, deadline=PLAN_LIST_DEADLINE_S
        )
        observations = await observer.observe(zones, clock.now())
    finally:
        for cloud in clouds.values():
            await cloud.aclose()
    plan = make_plan(
        config.fleets, observations, snapshot, clock.now(), config.policy, config.daemon.owner
    )
    return observations, plan


def blind_reason(observations: Sequence[ZoneObservation]) -> str | None:
    """Why the plan was made blind: every zone's list failed (None if one succeeded)."""
    if not observations or any(o.ok for o in observations):
        return None
    failed = observations[0]
    return (
        f"no zone could be listed ({', '.join(o.zone for o in observations)}): "
        f"{failed.zone}: {one_line(error_text(failed.error, failed.error_message))}"
    )


def plan_command(args: argparse.Namespace) -> int:
    config = load(args)
    try:
        observations, plan = asyncio.run(observe_and_plan(config))
    except StartupError as exc:
        raise UsageError(str(exc)) from None
    print(plan.to_json() if args.json else plan.render())
    reason = blind_reason(observations)
    if reason is not None:
        sys.stdout.flush()
        print(f"tpucared plan: {reason}", file=sys.stderr)
        return 1
    return 0
