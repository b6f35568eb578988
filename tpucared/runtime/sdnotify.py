"""systemd's notify protocol, the daemon's side: READY=1, WATCHDOG=1, STATUS=, STOPPING=1.

`Notifier` owns one non-blocking AF_UNIX datagram socket towards `$NOTIFY_SOCKET` (a path, or
an abstract name written `@name`). `TickNotifier` says what is sent when; `daemon.run_daemon`
chains its `on_tick` after telemetry's on the reconcile loop's hook and calls `stopping()`
when the stop event is set:
- after every completed tick: WATCHDOG=1 (from the loop itself, not a timer of its own, so a
  hung loop stops the pings and systemd restarts it) and STATUS=, one line from the Tick;
- with the first of those ticks that listed at least one zone (or had none to list): READY=1.
  Ticks before it send EXTEND_TIMEOUT_USEC= (the watchdog interval) instead, so an API that
  is down at boot keeps the unit starting rather than failing it, while a hung loop is still
  caught;
- when shutdown begins: STOPPING=1, once.
Without `$NOTIFY_SOCKET` (not under systemd, or `Type=` other than notify) every call is a
no-op. A send never raises into the daemon and never blocks the event loop: a failure is
logged once (a warning), then ignored, since missing pings only get the daemon restarted,
which is the point of the watchdog. `$WATCHDOG_USEC` (and `$WATCHDOG_PID`, when set) tell
whether systemd's watchdog expects pings from this process (`watchdog_usec`).

The protocol: sd_notify(3); one datagram holds newline-separated `KEY=value` assignments.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence

import structlog

from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import FleetSpec
from tpucared.runtime.reconciler import Tick

log = structlog.get_logger(__name__)


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.socket_name = env.get("NOTIFY_SOCKET", "")
        self.address = _address(self.socket_name)
        self.watchdog_usec = _watchdog_usec(env)
        self._socket: socket.socket | None = None
        self._failed = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, **fields: str | int) -> bool:
        """Send `KEY=value` lines in one datagram (`notify(READY=1, STATUS="...")`); True
        when sent. Values are one line each: newlines become spaces."""
        if self.address is None:
            return False
        message = "\n".join(f"{k}={_one_line(v)}" for k, v in fields.items())
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # close-on-exec
                self._socket.setblocking(False)
            self._socket.sendto(message.encode(), self.address)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                log.warning(
                    "systemd.notify_failed",
                    hint="carrying on without it",
                    socket=self.socket_name,
                    error=str(exc),
                )
            return False
        return True

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


class TickNotifier:
    """What systemd hears of the daemon's ticks and its stop (see the module docstring)."""

    def __init__(self, notifier: Notifier, fleets: Sequence[FleetSpec]) -> None:
        self.notifier = notifier
        self._fleets = frozenset(f.name for f in fleets)
        self._slots = sum(f.size for f in fleets)
        self.ready = False
        self._stopping = False

    async def on_tick(self, tick: Tick) -> None:
        if not self.notifier.enabled or self._stopping:
            return
        fields: dict[str, str | int] = {}
        if not self.ready and listed_a_zone(tick):
            self.ready = True
            fields["READY"] = 1
        elif not self.ready and self.notifier.watchdog_usec is not None:
            fields["EXTEND_TIMEOUT_USEC"] = self.notifier.watchdog_usec
        fields["STATUS"] = self.status(tick)
        fields["WATCHDOG"] = 1
        self.notifier.notify(**fields)

    def standing_by(self) -> None:
        """A standby (runtime/leader.py) whose lease attempt the database answered: it is up
        (READY=1, once) and alive (WATCHDOG=1), though it does not tick."""
        if not self.notifier.enabled or self._stopping:
            return
        fields: dict[str, str | int] = {"STATUS": "standby: another tpucared leads", "WATCHDOG": 1}
        if not self.ready:
            self.ready = True
            fields["READY"] = 1
        self.notifier.notify(**fields)

    def stopping(self) -> None:
        """STOPPING=1, once, however many times shutdown is noticed."""
        if self._stopping:
            return
        self._stopping = True
        self.notifier.notify(STOPPING=1, STATUS="stopping: draining calls in flight")

    def status(self, tick: Tick) -> str:
        """One line, e.g. "tick 42: 8/8 slots ready, 0 creating, 1/1 zones listed, last tick
        0.31 s" (the slots as the tick read them, before its own actions)."""
        phases = [n.phase for n in tick.snapshot.nodes.values() if n.fleet in self._fleets]
        ready = sum(p is NodePhase.READY for p in phases)
        creating = sum(p in (NodePhase.REQUESTED, NodePhase.CREATING) for p in phases)
        listed = sum(o.ok for o in tick.observations)
        waiting = "" if self.ready else " (not ready: no zone listed yet)"
        return (
            f"tick {tick.number}: {ready}/{self._slots} slots ready, {creating} creating, "
            f"{listed}/{len(tick.observations)} zones listed, last tick {tick.seconds:.2f} s"
            f"{waiting}"
        )


def listed_a_zone(tick: Tick) -> bool:
    """The tick saw the cloud: a zone list succeeded, or there was no zone to list."""
    return not tick.observations or any(o.ok for o in tick.observations)


def _address(value: str) -> str | bytes | None:
    if value.startswith("@") and len(value) > 1:
        return b"\0" + value[1:].encode()  # Linux's abstract namespace
    if value.startswith("/"):
        return value
    return None  # absent, or a form we do not speak (vsock): not notifying


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    """The watchdog interval in microseconds, when it watches this process; else None."""
    pid = env.get("WATCHDOG_PID")
    if pid is not None and pid != str(os.getpid()):
        return None
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec if usec > 0 else None


def _one_line(value: str | int) -> str:
    return " ".join(str(value).splitlines())
