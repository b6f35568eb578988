"""`tpucared down`: mark fleets down and delete every node tpucared owns for them; `up`
undoes the mark.

The deleting is the daemon's own machinery, not a separate code path: the fleets are marked
down in the store (`FleetRecord.down`, kept until changed), and a reconcile loop runs over
just those fleets until nothing of theirs is left. The planner does the rest: a down fleet's
slots are unwanted, so its nodes are deleted, nodes of ours it has no record of are adopted
and deleted, and nodes without our labels (or of another owner) are never touched, whatever
their names. The other fleets of the config are left out of this loop entirely (they are
not passed to the planner, and notices about them are dropped here), so `down sweep` never
creates, deletes or reports anything of another fleet. A running daemon sees the mark too
and keeps the fleet down, across restarts, until `tpucared up` clears it.

Both build the credentials before they open anything, as `tpucared run` does: bad ones are one
line (a `StartupError`, exit 2) and leave no database and no SSH key behind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from tpucared.config import Config
from tpucared.core.nodes.slots import spec_json
from tpucared.core.planning.down import down_finished
from tpucared.core.vocab.actions import DeleteNode
from tpucared.runtime.clock import Clock
from tpucared.runtime.daemon import Daemon
from tpucared.runtime.errors import StartupError
from tpucared.runtime.nodes.calls import NodeTemplate
from tpucared.runtime.reconciler import Tick
from tpucared.runtime.resources import Resources, credentials, open_resources
from tpucared.runtime.signals import TwoStageSignals
from tpucared.store import Store

log = structlog.get_logger(__name__)


@dataclass
class DownResult:
    fleets: tuple[str, ...]
    deleted: list[DeleteNode] = field(default_factory=list)
    finished: bool = False
    left: list[str] = field(default_factory=list)  # live incarnations when it gave up
    exit_code: int = 0


async def down(
    config: Config,
    fleets: Sequence[str],
    *,
    give_up_after: float,
    clock: Clock | None = None,
    report: Callable[[str], None] = print,
) -> DownResult:
    names = tuple(dict.fromkeys(fleets)) or tuple(f.name for f in config.fleets)
    configured = {f.name for f in config.fleets}
    # As `run` does: bad credentials are refused before the database is created or migrated.
    tokens = await credentials(config)
    async with open_resources(config, clock=clock) as res:
        await _mark_down(res.store, config, names, configured, res.clock)
        await res.connect(tokens=tokens)
        # No creates happen for down fleets: nodes need no SSH key, so none is generated.
        template = NodeTemplate(
            project=config.gcp.project, metadata={}, enable_external_ips=not config.ssh.internal_ip
        )
        daemon = Daemon.over(
            res,
            template,
            specs=[f for f in config.fleets if f.name in names],
            plan_filter=lambda plan: plan.without_notices_outside(names),
        )
        result = DownResult(fleets=names)
        until = _watch(result, config, names, res.clock.monotonic() + give_up_after, report, res)
        with TwoStageSignals(daemon.stop):
            code = await daemon.run(until=until)
        if result.finished:  # the down fleets' shared resources (templates, policies) too
            await daemon.sweeper.now([f for f in config.fleets if f.name in names], ())
        result.exit_code = code if result.finished else max(code, 1)
        return result


def _watch(
    result: DownResult,
    config: Config,
    names: Sequence[str],
    deadline: float,
    report: Callable[[str], None],
    res: Resources,
) -> Callable[[Tick], bool]:
    """The loop's `until`: report each delete, stop when done (core/planning/down.py) or at
    the deadline."""
    zones = {(f.project, z) for f in config.fleets if f.name in names for z in f.zones}

    def until(tick: Tick) -> bool:
        for action in tick.execution.deletes():
            if action.incarnation_id not in {d.incarnation_id for d in result.deleted}:
                result.deleted.append(action)
                report(
                    f"deleting {action.node_name} in {action.zone} "
                    f"({action.fleet}/{action.slot}): {action.reason}"
                )
        if down_finished(tick.plan, tick.snapshot, tick.observations, names, zones):
            result.finished = True
            return True
        if res.clock.monotonic() >= deadline:
            result.left = sorted(
                f"{i.node_name} ({i.phase.value})"
                for i in tick.snapshot.nodes.values()
                if i.fleet in names
            )
            return True
        return False

    return until


async def _mark_down(
    store: Store, config: Config, names: Sequence[str], configured: set[str], clock: Clock
) -> None:
    now = clock.now()
    async with store.write() as tx:
        for name in names:
            if await tx.fleet(name) is None:
                if name not in configured:
                    raise StartupError(
                        f"{config.path}: no fleet named {name!r} in the config or the database"
                    )
                spec = config.fleet(name)
                await tx.record_fleet(
                    name, spec.spec_hash(), spec_json(spec), now, reason="recorded by tpucared down"
                )
            await tx.set_fleet_down(
                name, True, now, reason=f"tpucared down: deleting every node of fleet {name}"
            )
            log.info("fleet.marked_down", fleet=name)


async def up(config: Config, fleets: Sequence[str], *, clock: Clock | None = None) -> list[str]:
    """Clear the down mark of `fleets`; returns those that were down. `up` makes no cloud call,
    but its credentials are checked first all the same: the fleets it wants again are recreated
    with them, and a bad `[gcp] credentials` is better refused here, before the database is
    created or migrated, than by the daemon later."""
    await credentials(config)
    changed = []
    async with open_resources(config, clock=clock) as res, res.store.write() as tx:
        for name in dict.fromkeys(fleets):
            record = await tx.fleet(name)
            if record is None:
                raise StartupError(f"{config.path}: no fleet named {name!r} in the database")
            if record.down:
                await tx.set_fleet_down(
                    name, False, res.clock.now(), reason=f"tpucared up: fleet {name} wanted again"
                )
                changed.append(name)
    return changed
