"""The daemon: `tpucared run`, and the wiring of the reconcile machinery it shares with
`tpucared down`.

`Daemon` assembles, over one store and the clouds' ports (one Cloud port per cloud API,
tpucared/ports/cloud.py; runtime/clouds.py maps each fleet to its own): the operation watcher,
the cloud calls, the executor, the slots' workload jobs (given a runner), the reconciler and
the loop, sharing one stop event and one wakeup. `Daemon.run()` supervises the root tasks
("reconcile", "operations", plus any extra ones, e.g. an HTTP server) until stop, then gives
cloud calls and workload actions in flight `DRAIN_TIMEOUT_S` to finish and record their outcome
(probes in flight are cancelled): a stop is prompt whatever is in flight (docs/daemon.md,
"Stopping"). Exit status: 0 after a requested stop, 1 when a root task or a background cloud
call died (logged). A term that ends because the database went away (`StoreUnavailable` from
any task) is no failure: `Daemon.store_lost` says why, and `tpucared run` stands by until the
database answers again (runtime/terms.py). A slot's workload job that fails is contained to its
slot (runtime/workload/failures.py): logged, recorded, retried after a backoff; it never stops
the daemon.

`run_daemon(config)` is `tpucared run`, in the order the contract gives: build the
credentials (before anything is created: bad ones leave no database and no key), migrate the
database and open the store (`resources.open_resources`, one AsyncExitStack that closes
everything in reverse), make sure the SSH key exists, connect the clouds, record the
calls the previous run left without an outcome (calls.py), serve /healthz, /metrics and
/v1/status (telemetry/), start `tpucared check`'s checks in the background (preflight/,
logged; `daemon.start_checks`), then loop, with two-stage signals (signals.py). Nodes are never
deleted by stopping. Under systemd (`$NOTIFY_SOCKET`, sdnotify.py) it says READY=1 after the
first tick that listed a zone, WATCHDOG=1 and STATUS= after every tick (chained after
telemetry's hook), and STOPPING=1 as soon as the stop event is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import structlog

from tpucared import __version__
from tpucared.config import Config
from tpucared.core.leadership.lease import Role
from tpucared.core.model.records import CreateAttemptRecord, IncarnationRecord
from tpucared.core.model.specs import FleetSpec
from tpucared.notify import WebhookSender, resolve_webhooks
from tpucared.notify.sender import Webhook, WebhookConfigError
from tpucared.ports.cloud import Clouds, OperationState, TokenSource
from tpucared.ports.launcher import Launcher
from tpucared.preflight import start_checks
from tpucared.runtime.clock import Clock, SystemClock
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.deadlines import operation_poll_deadline
from tpucared.runtime.errors import StartupError
from tpucared.runtime.leader import LeaseKeeper
from tpucared.runtime.loop import ReconcileLoop, TickHook
from tpucared.runtime.maintenance import Maintenance
from tpucared.runtime.nodes.calls import CloudCalls, NodeTemplate
from tpucared.runtime.nodes.executor import Executor
from tpucared.runtime.nodes.interrupted import record_interrupted_calls
from tpucared.runtime.nodes.observer import Observer
from tpucared.runtime.nodes.operations import OperationWatcher, PollSchedule
from tpucared.runtime.nodes.preemptions import PreemptionReader
from tpucared.runtime.nodes.sweeps import Sweeper
from tpucared.runtime.notifications import Notifications
from tpucared.runtime.oslogin import oslogin_of, start_os_login
from tpucared.runtime.reconciler import PlanFilter, Reconciler, Tick
from tpucared.runtime.resources import Resources, credentials, open_resources
from tpucared.runtime.sdnotify import Notifier, TickNotifier
from tpucared.runtime.signals import TwoStageSignals, relayed, told_on_stop
from tpucared.runtime.startup import node_template, os_login_key
from tpucared.runtime.tasks import RootTask, TaskSet, supervise
from tpucared.runtime.telemetry.endpoints import Telemetry
from tpucared.runtime.terms import LOST_DRAIN_S, lead_while_elected
from tpucared.runtime.wakeup import Wakeup
from tpucared.runtime.workload.jobs import WorkloadJobs
from tpucared.runtime.workload.launchers import guest_attribute_host_keys
from tpucared.runtime.workload.runner import WorkloadRunner
from tpucared.store import Store
from tpucared.store.engine import shown
from tpucared.store.errors import LeaseLost, StoreUnavailable

log = structlog.get_logger(__name__)

# Cloud calls and workload actions in flight at a stop get this long to record their outcome;
# the rest are cancelled and reconciled by the next start as after a crash (their intent is
# recorded first). With the root tasks' grace (tasks.py) a stop takes under 2 s.
DRAIN_TIMEOUT_S = 0.5


class Daemon:
    def __init__(
        self,
        config: Config,
        store: Store,
        clouds: Clouds,
        template: NodeTemplate,
        *,
        clock: Clock | None = None,
        specs: Sequence[FleetSpec] | None = None,
        plan_filter: PlanFilter | None = None,
        on_tick: TickHook | None = None,
        on_attempt: Callable[[CreateAttemptRecord], None] | None = None,
        workloads: WorkloadRunner | None = None,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        # Every fleet's cloud, including the fleets `specs` leaves out (`down`).
        self.clouds = CloudMap(clouds, config.fleets)
        self.clock = clock or SystemClock()
        poll = config.daemon.poll_interval
        self.stop = asyncio.Event()
        self.wakeup = Wakeup()
        self.failures: list[BaseException] = []
        self.store_lost: StoreUnavailable | None = None  # the term ended for this (docstring)
        self.tasks = TaskSet(self._background_failed)
        schedule = PollSchedule.for_poll_interval(poll)
        self.watcher = OperationWatcher(
            self.clouds, store, self.clock, self.wakeup, schedule, on_attempt=on_attempt,
            deadline=operation_poll_deadline(poll),
        )  # fmt: skip
        self.calls = CloudCalls(
            self.clouds, store, self.clock, template, self.watcher, self.wakeup, self.tasks,
            max_creates=config.policy.max_creates, on_attempt=on_attempt, guard=guard,
        )  # fmt: skip
        self.workloads = None if workloads is None else self._slot_jobs(workloads)
        if workloads is not None:
            workloads.start_maintenance_with(self._start_maintenance)
        self.sweeper = Sweeper(self.clouds, config.gcp.project, self.tasks)
        self.reconciler = Reconciler(
            specs=config.fleets if specs is None else specs,
            policy=config.policy,
            owner=config.daemon.owner,
            observer=Observer(self.clouds, config.gcp.project, deadline=poll),
            store=store,
            executor=Executor(store, self.calls, budget=poll),
            watcher=self.watcher,
            clock=self.clock,
            plan_filter=plan_filter,
            workloads=self.workloads,
            reuse_lists_within=poll,
            guard=guard,
            poll_interval=poll,
            preemptions=PreemptionReader(self.clouds, config.gcp.project, deadline=poll),
            sweeper=self.sweeper,
        )
        self.loop = ReconcileLoop(self.reconciler, self.clock, self.wakeup, poll, on_tick=on_tick)

    @classmethod
    def over(cls, resources: Resources, template: NodeTemplate, **options: Any) -> Daemon:
        """The daemon over a command's open resources (`open_resources`, then `connect`)."""
        if resources.clouds is None:
            raise RuntimeError("Daemon.over needs connected resources")
        return cls(
            resources.config,
            resources.store,
            resources.clouds,
            template,
            clock=resources.clock,
            **options,
        )

    async def _start_maintenance(self, inc: IncarnationRecord) -> OperationState:
        """A node's pending maintenance started now, through the cloud that made it."""
        project = inc.project or self.config.gcp.project
        return await self.clouds.for_node(inc).start_maintenance(project, inc.zone, inc.node_name)

    def _slot_jobs(self, runner: WorkloadRunner) -> WorkloadJobs:
        """The slots' SSH work (probes, workload actions), off the tick; probed once per poll,
        or less often past `ssh.probe_rate` worker probes a second."""
        return WorkloadJobs(
            runner,
            wakeup=self.wakeup,
            clock=self.clock,
            probe_interval=self.config.daemon.poll_interval,
            probe_rate=self.config.ssh.probe_rate,
            on_failure=self._background_failed,
        )

    def _background_failed(self, exc: BaseException) -> None:
        if isinstance(exc, StoreUnavailable):
            self.database_gone(exc)
        elif not isinstance(exc, LeaseLost):  # the lease keeper says so, and the term ends
            self.failures.append(exc)
        self.stop.set()

    def database_gone(self, exc: StoreUnavailable) -> None:
        if self.store_lost is None:
            self.store_lost = exc
            log.warning(
                "database.unavailable",
                hint="acting on nothing until it answers again; standing by",
                error=str(exc),
            )

    async def run(
        self,
        *,
        until: Callable[[Tick], bool] | None = None,
        extra_roots: Mapping[str, RootTask] | None = None,
        drain_timeout: float | Callable[[], float] = DRAIN_TIMEOUT_S,
    ) -> int:
        """Until stop; `drain_timeout` may be a function, asked when the drain begins (a term
        that lost its lease drains briefly: runtime/terms.py)."""
        roots: dict[str, RootTask] = {
            "reconcile": lambda: self.loop.run(self.stop, until),
            "operations": lambda: self.watcher.run(self.stop),
            **(extra_roots or {}),
        }
        code = 0
        if self.workloads is not None:
            await self.workloads.restore()  # failing workload jobs the last run left
        try:
            await supervise(roots, self.stop, self.clock)
        except* LeaseLost as group:  # a fenced write: no failure, this term is over
            log.info("term.lease_lost", why=str(group.exceptions[0]))
        except* StoreUnavailable as gone:  # weather: no failure, this term is over
            first = gone.exceptions[0]
            if not isinstance(first, StoreUnavailable):  # a nested group: its message will do
                first = StoreUnavailable(str(first))
            self.database_gone(first)
        except* Exception as group:
            log.error("daemon.failed", errors=[repr(e) for e in group.exceptions])
            code = 1
        within = drain_timeout() if callable(drain_timeout) else drain_timeout
        drains = [self.tasks.drain(self.clock, within)]
        if self.workloads is not None:
            drains.append(self.workloads.drain(within))
        cancelled, *chains = await asyncio.gather(*drains)
        if cancelled:
            log.warning(
                "stop.cloud_calls_cut",
                hint="their intent is recorded and the next run resumes",
                cancelled=cancelled,
            )
        if any(chains):
            log.warning(
                "stop.workload_actions_cut",
                hint="a launch is recorded before it starts, so the next run resumes or ends it",
                cancelled=sum(chains),
            )
        if self.failures:
            code = 1
        return code


async def run_daemon(
    config: Config,
    *,
    clock: Clock | None = None,
    stop: asyncio.Event | None = None,
    until: Callable[[Tick], bool] | None = None,
    serve_http: bool = True,
    handle_signals: bool = True,
    drain_timeout: float = DRAIN_TIMEOUT_S,
    launcher: Launcher | None = None,
) -> int:
    """`tpucared run`: returns the exit status. StartupError and the store's DatabaseError
    (a broken or foreign database, or another daemon holding the single-writer lock, which is
    taken before anything touches the database) propagate.

    Embedders (`tpucared demo`, `babysit`) stop it themselves: `stop` ends it when set,
    `until(tick)` when true, and `handle_signals=False` leaves SIGINT/SIGTERM to them.
    `launcher`: what runs the workloads (the Launcher port), by default the SSH launcher."""
    # Signals are handled before the first line is logged: a TERM during start-up (systemd
    # stopping a unit that is still migrating, say) is the same clean stop as one in a tick.
    stopping = asyncio.Event()
    with TwoStageSignals(stopping) if handle_signals else contextlib.nullcontext():
        log.info(
            "daemon.starting",
            version=__version__,
            config=str(config.path),
            db=shown(config.daemon.db),
            owner=config.daemon.owner,
            fleets={f.name: f"{f.size} x {f.accelerator_type}" for f in config.fleets},
            poll_interval_s=config.daemon.poll_interval,
        )
        code = await _started_and_run(
            config,
            stopping,
            stop,
            clock=clock,
            until=until,
            serve_http=serve_http,
            drain_timeout=drain_timeout,
            launcher=launcher,
        )
    log.info("daemon.stopped", exit_code=code)
    return code


async def _started_and_run(
    config: Config,
    stopping: asyncio.Event,
    stop: asyncio.Event | None,
    *,
    clock: Clock | None,
    until: Callable[[Tick], bool] | None,
    serve_http: bool,
    drain_timeout: float,
    launcher: Launcher | None = None,
) -> int:
    """run_daemon's body: open everything, run the loop until `stopping` (signals) or `stop`
    (embedders) is set."""
    tokens = await credentials(config)  # bad credentials: no database, no key left behind
    try:  # an unset url_env, like bad credentials, stops the start before the database
        webhooks = resolve_webhooks(config.notify, os.environ)
    except WebhookConfigError as exc:
        raise StartupError(f"{config.path}: {exc}") from None
    async with open_resources(config, clock=clock, single_writer=True) as res:
        log.info("database.ready", revision=res.revision)
        telemetry = Telemetry(config, res.store, res.clock)
        res.stack.push_async_callback(telemetry.stop)
        run = await _wired(config, res, tokens, telemetry, webhooks, launcher)
        if config.daemon.start_checks:  # `tpucared check`'s, logged, in the background
            res.stack.push_async_callback(start_checks(config, tokens))
        run.until, run.drain_timeout = until, drain_timeout
        if serve_http:
            await telemetry.start()
        for source in (stopping, stop):
            if source is not None:
                await res.stack.enter_async_context(relayed(source, run.stopped))
        async with told_on_stop(run.stopped, run.systemd):
            return await lead_while_elected(
                run.keeper, run.stopped, run.term, warm=res.store.load_snapshot,
                every=config.daemon.poll_interval,
            )  # fmt: skip


RootFactory = Callable[[asyncio.Event], Awaitable[None]]  # a root task, given the term's stop


@dataclass
class _Run:
    """What `tpucared run` holds across its terms of leadership (runtime/terms.py)."""

    config: Config
    res: Resources
    template: NodeTemplate
    telemetry: Telemetry
    workloads: WorkloadRunner
    systemd: TickNotifier
    news: Notifications
    keeper: LeaseKeeper
    roots: dict[str, RootFactory]
    until: Callable[[Tick], bool] | None = None
    drain_timeout: float = DRAIN_TIMEOUT_S
    stopped: asyncio.Event = field(default_factory=asyncio.Event)  # the run is to stop

    async def term(self, lost: asyncio.Event) -> int:
        """One term of leadership: a fresh daemon until `lost`."""
        res, telemetry = self.res, self.telemetry
        daemon = Daemon.over(
            res,
            self.template,
            on_tick=_chained(telemetry.on_tick, self.systemd.on_tick, self.news.on_tick),
            on_attempt=telemetry.create_attempt,
            workloads=self.workloads,
            guard=self.keeper.check,
        )
        async with relayed(self.stopped, daemon.stop), relayed(lost, daemon.stop):
            try:
                await record_interrupted_calls(res.store, res.clock)
            except LeaseLost:
                return 0
            except StoreUnavailable as exc:
                daemon.database_gone(exc)
                self._stand_by(exc)
                return 0
            maintenance = Maintenance(res.store, self.config, res.clock)
            code = await daemon.run(
                until=self.until,
                drain_timeout=lambda: LOST_DRAIN_S if lost.is_set() else self.drain_timeout,
                extra_roots={
                    "maintenance": lambda: maintenance.run(daemon.stop),
                    "notifications": lambda: self.news.watch(daemon.stop),
                    **{name: partial(root, daemon.stop) for name, root in self.roots.items()},
                },
            )
            if daemon.store_lost is not None:
                self._stand_by(daemon.store_lost)
            return code

    def _stand_by(self, gone: StoreUnavailable) -> None:
        """The database went away during the term: no term may act until it answers again.
        Stepping down ends the term as a lost lease does; the keeper takes the lease again at
        its first attempt the database answers (runtime/terms.py)."""
        self.telemetry.database_unavailable(str(gone))
        self.keeper.step_down(f"the database is unavailable: {gone}")


async def _wired(
    config: Config,
    res: Resources,
    tokens: TokenSource,
    telemetry: Telemetry,
    webhooks: Sequence[Webhook],
    launcher: Launcher | None = None,
) -> _Run:
    """Connect the clouds, log in (OS Login), and build what every term shares: the workload
    runner, systemd's notifier, the webhooks' sender and news, the lease keeper."""
    template = node_template(config)
    clouds = await res.connect(on_request=telemetry.api_request, tokens=tokens)
    roots: dict[str, RootFactory] = {}
    if config.ssh.os_login:  # every login is then the profile's user (runtime/oslogin.py)
        key_line = await asyncio.to_thread(os_login_key, config)
        oslogin = oslogin_of(config, clouds)
        login = await start_os_login(config, oslogin, tokens, key_line, res.clock)
        config = replace(config, ssh=replace(config.ssh, user=login.username))
        roots["os_login"] = login.run
    await _warn_about_unconfigured(res.store, config)
    workloads = await asyncio.to_thread(
        WorkloadRunner.from_config,
        config,
        res.store,
        fetch_host_keys=guest_attribute_host_keys(
            CloudMap(clouds, config.fleets), config.gcp.project
        ),
        clock=res.clock.now,
        launcher=launcher,
    )
    res.stack.push_async_callback(workloads.close)  # workloads keep running; re-attached
    notifier = Notifier()
    res.stack.callback(notifier.close)
    systemd = TickNotifier(notifier, config.fleets)
    sender = WebhookSender(webhooks)
    await sender.start()
    res.stack.push_async_callback(sender.close)  # flushes for a few seconds at the end
    news = Notifications(sender, res.store, res.clock, telemetry.health.check)
    keeper = LeaseKeeper(
        res.store,
        config.daemon.lease,
        on_role=telemetry.role_changed,
        on_attempt=lambda role, epoch: _standing_by(role, epoch, telemetry, systemd),
    )
    telemetry.role_changed(keeper.role, None)
    return _Run(config, res, template, telemetry, workloads, systemd, news, keeper, roots)


def _standing_by(role: Role, epoch: int, telemetry: Telemetry, systemd: TickNotifier) -> None:
    """After each lease attempt the database answered: a standby is alive (health, systemd)."""
    telemetry.lease_answered(role, epoch)
    if role is Role.STANDBY:
        systemd.standing_by()


def _chained(*hooks: TickHook) -> TickHook:
    """One tick hook running `hooks` in order (the loop takes one)."""

    async def chained(tick: Tick) -> None:
        for hook in hooks:
            await hook(tick)

    return chained


async def _warn_about_unconfigured(store: Store, config: Config) -> None:
    """Fleets the database knows that the config no longer lists are left alone: say so."""
    snapshot = await store.load_snapshot()
    names = {f.name for f in config.fleets}
    for fleet in sorted(snapshot.fleets.values(), key=lambda f: f.name):
        if fleet.name in names or fleet.down:
            continue
        live = [n.node_name for n in snapshot.nodes.values() if n.fleet == fleet.name]
        log.warning(
            "fleet.unconfigured",
            hint="its nodes are left alone (add it back, or run `tpucared down` for it, "
            "to delete them)",
            fleet=fleet.name,
            live_nodes=live,
        )
