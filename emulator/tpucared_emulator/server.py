"""EmulatorServer: the emulated TPU v2 and Compute Engine v1 APIs on a local port, their
lifecycle, and `tpucared emulator`.

Wires the pieces together: one `EmulatorState` (the cloud) with its Compute Engine book
(compute/), the v2 API (api.py), the compute v1 API (compute/api.py) and the control APIs
(control.py, compute/control.py) on one aiohttp application behind the request pipeline
(middleware.py), and the driver (driver.py) that fires timers and calls the worker-hosts hook.

    async with running_emulator(create_seconds=0.2) as emulator:
        client = TpuClient(endpoint=emulator.url)   # "http://127.0.0.1:<port>"

With `ssh_hosts=True` (the CLI's default) every worker of a READY node is also an SSH server
on its own address and `ssh_port` (hosts/); pass `worker_hosts=` to supply another hook.

`main(argv)` is the `tpucared emulator` command: it serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from typing import Any

import structlog
from aiohttp import web

from tpucared_emulator import fields
from tpucared_emulator.api import V2Api
from tpucared_emulator.api_v2alpha1 import V2Alpha1Api
from tpucared_emulator.clock import Clock
from tpucared_emulator.compute import (
    ComputeApi,
    ComputeBook,
    ComputeControl,
    ComputeRequests,
    MigRequests,
    Migs,
    Shared,
)
from tpucared_emulator.control import ControlApi
from tpucared_emulator.driver import Driver
from tpucared_emulator.faults import FaultInjector
from tpucared_emulator.host_hook import NoWorkerHosts, WorkerHosts
from tpucared_emulator.hosts import SshWorkerHosts
from tpucared_emulator.middleware import make_middleware
from tpucared_emulator.options import STOCKOUT_CODES, EmulatorOptions
from tpucared_emulator.oslogin import OsLoginApi, OsLoginRegistry
from tpucared_emulator.persistence import load_state, save_state
from tpucared_emulator.preflight import PreflightApi
from tpucared_emulator.requestlog import RequestLog
from tpucared_emulator.state import EmulatorState

log = structlog.get_logger(__name__)

DEFAULT_PORT = 8471
# The CLI's SSH port for simulated workers. Not 22: that needs root, and a machine's own sshd
# listening on 0.0.0.0:22 would make every bind on 127.x.y.z:22 fail. Point the daemon's
# `[ssh] port` here (or run with `--ssh-port 22` as root on a machine without sshd).
DEFAULT_SSH_PORT = 2222


class EmulatorServer:
    def __init__(
        self,
        options: EmulatorOptions | None = None,
        *,
        worker_hosts: WorkerHosts | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.options = options or EmulatorOptions()
        self.state = EmulatorState(self.options, clock)
        # Compute Engine instances on the same cloud (compute/): attached as `state.vms`.
        self.compute = ComputeBook(self.state)
        # Its managed instance groups, templates and workload policies: attached as `groups`.
        self.migs = Migs(self.compute, Shared(self.compute))
        # Profiles belong to accounts, not to the cloud's resources: a control reset keeps them.
        self.os_login = OsLoginRegistry(lambda: int(self.state.now() * 1_000_000))
        self.faults = FaultInjector()
        self.requests = RequestLog(self.options.request_log_size)
        if worker_hosts is None and self.options.ssh_hosts:
            worker_hosts = SshWorkerHosts.from_options(
                self.options, os_login=self.os_login if self.options.os_login else None
            )
        self.worker_hosts: WorkerHosts = worker_hosts or NoWorkerHosts()
        self._driver: Driver | None = None
        self._runner: web.AppRunner | None = None
        self._url: str | None = None

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[make_middleware(self.state, self.faults, self.requests)])
        api = V2Api(self.state)
        partials = fields.PartialMemo()

        async def v2(request: web.Request) -> web.Response:
            # A partial response (`fields`, fields.py): checked before the request acts.
            raw = request.query.get("fields")
            if not raw:
                return web.json_response(await api.dispatch(request))
            selection = fields.parse(raw)
            body = partials.body(await api.dispatch(request), selection, raw)
            return web.Response(body=body, content_type="application/json", charset="utf-8")

        app.router.add_route("*", "/v2/{tail:.*}", v2)
        V2Alpha1Api(self.state).add_routes(app)  # performMaintenance, simulateMaintenanceEvent
        ComputeApi(ComputeRequests(self.compute), MigRequests(self.migs)).add_routes(app)
        ControlApi(self.state, self.faults, self.requests, self.worker_hosts).add_routes(app)
        ComputeControl(self.compute).add_routes(app)
        OsLoginApi(self.os_login).add_routes(app)
        PreflightApi(self.state).add_routes(app)  # `tpucared check`'s read calls
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        if self._runner is not None:
            raise RuntimeError("emulator already started")
        if self.options.state_file:
            load_state(self.state, self.options.state_file)
        self._driver = Driver(self.state, self.worker_hosts)
        self._driver.start()
        runner = web.AppRunner(self.build_app(), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            await self._driver.stop()
            self._driver = None
            raise
        self._runner = runner
        bound_host, bound_port = runner.addresses[0][:2]
        self._url = f"http://{bound_host}:{bound_port}"
        ssh = self.worker_hosts.port if isinstance(self.worker_hosts, SshWorkerHosts) else None
        log.info("emulator.started", url=self._url, ssh_port=ssh)

    @property
    def url(self) -> str:
        """Base URL of the API, e.g. "http://127.0.0.1:8471" (no trailing slash)."""
        if self._url is None:
            raise RuntimeError("emulator not started")
        return self._url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._driver is not None:
            await self._driver.stop()
            self._driver = None
        if self.options.state_file:
            save_state(self.state, self.options.state_file)
        if self._url is not None:
            log.info("emulator.stopped", url=self._url)
        self._url = None

    async def __aenter__(self) -> EmulatorServer:
        if self._runner is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@contextlib.asynccontextmanager
async def running_emulator(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    worker_hosts: WorkerHosts | None = None,
    clock: Clock | None = None,
    **options: Any,
) -> AsyncIterator[EmulatorServer]:
    """A started emulator for the duration of the block; keyword options are EmulatorOptions."""
    server = EmulatorServer(EmulatorOptions(**options), worker_hosts=worker_hosts, clock=clock)
    await server.start(host, port)
    try:
        yield server
    finally:
        await server.stop()


def _capacity_flags(parser: argparse.ArgumentParser) -> None:
    """The models of what Google does not document about capacity (README, "The emulator")."""
    parser.add_argument(
        "--capacity-judged",
        choices=("post", "end"),
        default=EmulatorOptions.capacity_judged,
        help="when a create meets a stockout: when it is posted (default) or when its "
        "operation ends (a create posted in a stockout succeeds if capacity came back)",
    )
    parser.add_argument(
        "--queued-serve",
        choices=("at-once", "scan"),
        default=EmulatorOptions.queued_serve,
        help="when waiting queued resources get freed capacity: at once, before any plain "
        "create (default), or at scans every --queued-scan-seconds (a create may win between)",
    )
    parser.add_argument(
        "--queued-scan-seconds", type=float, default=EmulatorOptions.queued_scan_seconds
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpucared emulator",
        description="Serve the Cloud TPU v2 API and Compute Engine v1 for TPU VMs locally, "
        "with fault injection under /_emulator.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--create-seconds", type=float, default=EmulatorOptions.create_seconds)
    parser.add_argument("--delete-seconds", type=float, default=EmulatorOptions.delete_seconds)
    parser.add_argument(
        "--queued-provision-seconds",
        type=float,
        default=EmulatorOptions.queued_provision_seconds,
    )
    parser.add_argument(
        "--spot-mean-lifetime-seconds",
        type=float,
        default=None,
        help="preempt READY spot/preemptible nodes at random with this mean lifetime",
    )
    _capacity_flags(parser)
    parser.add_argument("--page-size", type=int, default=EmulatorOptions.default_page_size,
                        help="default nodes.list page size")  # fmt: skip
    parser.add_argument(
        "--ssh-hosts",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run an SSH server per worker of every READY node, executing commands locally",
    )
    parser.add_argument(
        "--ssh-port",
        type=int,
        default=DEFAULT_SSH_PORT,
        help="port of every worker's simulated SSH server (on the worker's own address)",
    )
    parser.add_argument(
        "--hosts-dir",
        default=None,
        help="directory for the simulated workers' homes (default: a temporary directory)",
    )
    parser.add_argument(
        "--os-login",
        action="store_true",
        help="enforce OS Login on every worker: only keys imported through /v1/users/... "
        "log in, as the profile's user; ssh-keys metadata is ignored",
    )
    _compute_arguments(parser)
    _maintenance_arguments(parser)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--state-file", default=None, help="JSON file to load at start, save at exit"
    )
    return parser


def _compute_arguments(parser: argparse.ArgumentParser) -> None:
    """The Compute Engine surface's unconfirmed behaviours most worth choosing from the command
    line (options.py has them all, with the research rows they stand for)."""
    parser.add_argument(
        "--compute-stockout-mode",
        choices=("operation", "sync_http", "born_done"),
        default=EmulatorOptions.compute_stockout_mode,
        help="where a Compute Engine stockout shows: the insert's operation (default), an HTTP "
        "503 from the insert, or an operation already DONE",
    )
    parser.add_argument(
        "--compute-stockout-code",
        choices=STOCKOUT_CODES,
        default=EmulatorOptions.compute_stockout_code,
    )
    parser.add_argument(
        "--compute-mig-on-member-loss",
        choices=("leave", "recreate_member"),
        default=EmulatorOptions.compute_mig_on_member_loss,
        help="what a DO_NOTHING managed instance group does when a VM is lost: leave it "
        "TERMINATED or gone (default), or create it again as REPAIR does",
    )


def _maintenance_arguments(parser: argparse.ArgumentParser) -> None:
    """Host maintenance (maintenance_run.py): its timing, and what a TPU node shows."""
    parser.add_argument(
        "--maintenance-lead-seconds",
        type=float,
        default=EmulatorOptions.maintenance_event_lead_seconds,
        help="how long before a maintenance instance/maintenance-event says "
        "TERMINATE_ON_HOST_MAINTENANCE (Google: 60)",
    )
    parser.add_argument(
        "--maintenance-duration-seconds",
        type=float,
        default=None,
        help="how long a node or VM is down for maintenance (default: the window's length)",
    )
    parser.add_argument(
        "--tpu-maintenance-node",
        choices=("unhealthy", "repairing", "terminated"),
        default=EmulatorOptions.tpu_maintenance_node,
        help="what a TPU API node shows during maintenance: READY with health "
        "UNHEALTHY_MAINTENANCE (default), REPAIRING, or TERMINATED for good",
    )


async def serve(options: EmulatorOptions, host: str, port: int) -> None:
    """Run until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = EmulatorServer(options)
    await server.start(host, port)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = EmulatorOptions(
        create_seconds=args.create_seconds,
        delete_seconds=args.delete_seconds,
        queued_provision_seconds=args.queued_provision_seconds,
        spot_mean_lifetime_seconds=args.spot_mean_lifetime_seconds,
        capacity_judged=args.capacity_judged,
        queued_serve=args.queued_serve,
        queued_scan_seconds=args.queued_scan_seconds,
        default_page_size=args.page_size,
        ssh_hosts=args.ssh_hosts,
        ssh_port=args.ssh_port,
        hosts_dir=args.hosts_dir,
        os_login=args.os_login,
        compute_stockout_mode=args.compute_stockout_mode,
        compute_stockout_code=args.compute_stockout_code,
        compute_mig_on_member_loss=args.compute_mig_on_member_loss,
        maintenance_event_lead_seconds=args.maintenance_lead_seconds,
        maintenance_duration_seconds=args.maintenance_duration_seconds,
        tpu_maintenance_node=args.tpu_maintenance_node,
        seed=args.seed,
        state_file=args.state_file,
    )
    asyncio.run(serve(options, args.host, args.port))
    return 0
