"""Host maintenance happening: the timeline both APIs share, from the notice to the return.

Where it sits: a window is announced by the control API (`:schedule-maintenance`, a `Window`
of maintenance.py) or started early by the API (`performMaintenance`,
`simulateMaintenanceEvent`). `Timeline` then drives three timers, each carrying the serial of
the maintenance it belongs to (`MaintenanceRun.serial`), so that one of an older maintenance
does nothing:

    notice  at start - maintenance_event_lead_seconds: `instance/maintenance-event` turns
            TERMINATE_ON_HOST_MAINTENANCE (60 s before, per compute/docs/metadata/
            getting-live-migration-notice), unless `maintenance_event_needs_poll` and the VM
            has not read the key since its last event ("If you have never queried the
            maintenance-event metadata key, or have not queried it since the last migration,
            Compute Engine assumes that the VM doesn't need to receive advance warning")
    down    at start: the node or instance is terminated (TPU VMs cannot live-migrate: every
            one is onHostMaintenance TERMINATE); what that means per API is the subclass's
            (maintenance_tpu.py, compute/maintenance.py)
    up      after the maintenance's duration (`maintenance_duration_seconds`, or the window's
            length): back, if the subclass says it comes back; the key is NONE again

Started early, the window begins now (ONGOING at once: "the host maintenance event starts
immediately", tpu/docs/manually-start-maintenance) and the termination follows the notice's
lead, as a simulated event's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from tpucared_emulator.maintenance import MaintenanceRun, Window

if TYPE_CHECKING:
    from tpucared_emulator.clock import Clock
    from tpucared_emulator.options import EmulatorOptions
    from tpucared_emulator.resources import Node

log = structlog.get_logger(__name__)

PHASES = ("notice", "down", "up")


def run_of(host: Node) -> MaintenanceRun:
    """The node's `MaintenanceRun`, made on first use."""
    if host.host_maintenance is None:
        host.host_maintenance = MaintenanceRun()
    return host.host_maintenance


class Timeline:
    """The phases of a maintenance, for one API's kind of target (a TPU API `Node`, a Compute
    Engine instance): subclasses say how to find, schedule, terminate and restart it."""

    def __init__(self, options: EmulatorOptions, clock: Clock) -> None:
        self.options = options
        self.clock = clock

    # -----------------------------------------------------------------------------------------
    # What a subclass provides.

    def host(self, name: str) -> Node | None:
        """The node (or instance's host) of this full name, if it still exists."""
        raise NotImplementedError

    def schedule(self, name: str, phase: str, delay: float, serial: int) -> None:
        raise NotImplementedError

    def notify(self, host: Node) -> None:
        """The metadata key changed: wake the requests waiting for a change."""
        raise NotImplementedError

    def take_down(self, name: str, now: float) -> bool:
        """Terminate it for the maintenance; True if it comes back ("up") afterwards."""
        raise NotImplementedError

    def bring_up(self, name: str, now: float) -> None:
        raise NotImplementedError

    def default_duration(self) -> float:
        """How long a maintenance with no window to measure lasts (a simulated event)."""
        raise NotImplementedError

    # -----------------------------------------------------------------------------------------
    # The timeline.

    def announce(self, name: str, host: Node, window: Window) -> None:
        """A window announced ahead (the control API): the notice and the termination are
        timed from its start. A newer announcement replaces the older one's timers."""
        host.maintenance = window
        run = self._new_run(host, window.end - window.start, None)
        now = self.clock.now()
        lead = self.options.maintenance_event_lead_seconds
        self.schedule(name, "notice", max(0.0, window.start - lead - now), run.serial)
        self.schedule(name, "down", max(0.0, window.start - now), run.serial)

    def start_now(
        self, name: str, host: Node, kind: str, workers: frozenset[int] | None = None
    ) -> None:
        """Maintenance starting now (performMaintenance, simulateMaintenanceEvent): ONGOING at
        once, the notice now, the termination after the lead. Lasts as long as the pending
        window would have (or `default_duration()` without one)."""
        old = host.maintenance
        pending = old is not None and old.status() is not None
        length = (old.end - old.start) if old is not None and pending else self.default_duration()
        now = self.clock.now()
        lead = self.options.maintenance_event_lead_seconds
        run = self._new_run(host, length, workers)
        host.maintenance = Window(now, now + lead + run.duration, kind, self.clock, False)
        self.schedule(name, "notice", 0.0, run.serial)
        self.schedule(name, "down", lead, run.serial)

    def tick(self, phase: str, name: str, serial: int, due: float) -> None:
        host = self.host(name)
        run = host.host_maintenance if host is not None else None
        if host is None or run is None or run.serial != serial:
            return  # gone, or a newer maintenance replaced this one
        if phase == "notice":
            if self.options.maintenance_event_needs_poll and not run.polled:
                log.info("emulator.maintenance.unwarned", target=name)
                return
            run.noticed = True
            self.notify(host)
            log.info("emulator.maintenance.notice", target=name)
        elif phase == "down":
            run.polled = False  # the event happened: a later one warns only a VM that asks again
            if self.take_down(name, due):
                run.down = True
                self.schedule(name, "up", run.duration, serial)
            else:
                run.noticed = False
                self.notify(host)
            log.info("emulator.maintenance.down", target=name, back=run.down)
        elif phase == "up":
            run.down = False
            run.noticed = False
            self.bring_up(name, due)
            self.notify(host)
            log.info("emulator.maintenance.up", target=name)

    def _new_run(self, host: Node, length: float, workers: frozenset[int] | None) -> MaintenanceRun:
        run = run_of(host)
        run.serial += 1
        run.noticed = False
        run.workers = workers
        duration = self.options.maintenance_duration_seconds
        run.duration = max(0.0, length if duration is None else duration)
        return run
