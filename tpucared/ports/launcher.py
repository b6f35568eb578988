"""The Launcher port: everything the runtime needs from whatever runs a workload on the workers.

Where it sits: runtime/workload/ (the runner's probes, the executor's launches, stops and
cleanups, the notice watches) calls a `Launcher`; the SSH implementation is
tpucared/launch/ (`SshLauncher`, over tpucared/ssh/ as transport), and a new kind of launcher
(a container instead of a shell command) implements this protocol in a package of its own.
The runtime decides nothing from how a launcher works: it gets the plain values below back
and the core's rules decide (core/workload/).

The runtime first asks where a slice's workers are (`locate`: a `Place`, or why they cannot be
reached), then acts on that place: every operation answers per worker, as data (`Reply`: the
worker's parsed answer, or why there is none), never by raising for a worker that failed. A
run is named by the slot's run id and the attempt number (`Run`); where a run lives on a
worker, how it is started, how the TPUCARED_* environment reaches it (the contract in
README.md, "Workload environment") and how its preemption notice is heard are the launcher's.

Beside it, `ByHand`: what a person's `tpucared logs`, `exec` and `cp` need (the workers as the
daemon recorded them, one command or file on some of them); the SSH implementation is
tpucared/launch/by_hand.py (`SshByHand`), chosen in runtime/workload/launchers.py.

Only types live here: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import BinaryIO, Generic, Protocol, TextIO, TypeVar

from tpucared.core.model.records import IncarnationRecord, WorkerRecord
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.workload.inputs import NoticeKind
from tpucared.core.workload.progress import Progress

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Where and what


@dataclass(frozen=True)
class Place:
    """One slice's workers as a launcher reaches them (`Launcher.locate`). `handle` is the
    launcher's own (the SSH launcher: its targets, host keys pinned); the runtime only
    carries it back."""

    inc: IncarnationRecord
    size: int  # how many workers
    handle: object = None


@dataclass(frozen=True)
class Run:
    """One attempt's run of a slot: `attempt` None names a run that never exists (attempt
    numbers start at 1), which a probe reports as gone: how idle slots are probed."""

    run_id: str
    attempt: int | None


@dataclass(frozen=True)
class SliceOf:
    """Where one worker's slice sits in a multislice job."""

    index: int  # TPUCARED_SLICE, MEGASCALE_SLICE_ID
    count: int  # TPUCARED_NUM_SLICES, MEGASCALE_NUM_SLICES
    coordinator: str  # slice 0 worker 0's address: MEGASCALE_COORDINATOR_ADDRESS

    def variables(self) -> dict[str, str]:
        return {
            "TPUCARED_SLICE": str(self.index),
            "TPUCARED_NUM_SLICES": str(self.count),
            "MEGASCALE_COORDINATOR_ADDRESS": self.coordinator,
            "MEGASCALE_NUM_SLICES": str(self.count),
            "MEGASCALE_SLICE_ID": str(self.index),
            "MEGASCALE_PORT": str(MEGASCALE_PORT),
        }


# The port the MEGASCALE coordinator listens on: what Levanter's and Ray's TPU launchers set
# (MEGASCALE_PORT=8081), with MEGASCALE_COORDINATOR_ADDRESS the first worker of slice 0.
MEGASCALE_PORT = 8081


@dataclass(frozen=True)
class Launch:
    """One attempt to start on every worker of a slice, with what the environment contract
    needs (the node and each worker's index come from the `Place`)."""

    fleet: str
    slot: int
    run: Run
    spec: WorkloadSpec
    preemptions: int
    failures: int
    slice_of: SliceOf | None = None  # a slice of a multislice job
    secrets: bool = False  # the slot's secrets were installed (`Launcher.install`)


@dataclass(frozen=True)
class WorkerFile:
    """A file the workload gets on every worker (`workload.files`)."""

    remote: str  # absolute, relative to the login home, or "~/..."
    content: bytes
    mode: int = 0o644

    def __repr__(self) -> str:
        return f"WorkerFile(remote={self.remote!r}, bytes={len(self.content)})"


@dataclass(frozen=True)
class WorkerLost:
    """A worker ended the launcher's connection to it (its VM going down, say)."""

    incarnation_id: int | None
    worker: int
    host: str


@dataclass(frozen=True)
class Reply(Generic[T]):
    """One worker's answer: `value`, or `why` there is none (unreachable, failed, unreadable)."""

    worker: int
    value: T | None = None
    why: str | None = None


class HostKeys(Protocol):
    """The host keys pinned for each worker of a node incarnation, kept by the runtime with
    the worker records (runtime/workload/hosts.py `WorkerHosts`), for a launcher that checks
    them (the SSH launcher). A key is an OpenSSH public key line ("ssh-ed25519 AAAA...")."""

    async def pins(
        self, inc: IncarnationRecord, workers: Sequence[WorkerRecord]
    ) -> dict[int, tuple[str, ...]]:
        """Every worker's pinned keys, by index (empty: none known yet, trust on first use);
        what the node's cloud publishes is asked for a worker with none."""
        ...

    async def remember(self, inc: IncarnationRecord, seen: Mapping[int, str]) -> None:
        """Trust on first use: pin the key each worker that had no pin presented."""
        ...


# ---------------------------------------------------------------------------------------------
# The answers


class LaunchState(StrEnum):
    STARTED = "started"  # a new run was started by this call
    RUNNING = "running"  # a run in this directory was already alive: nothing started
    EXITED = "exited"  # the run in this directory already finished: nothing started
    ERROR = "error"  # could not start; `reason` says why

    @property
    def runs(self) -> bool:
        """The attempt runs on the worker after this launch (started now, or already)."""
        return self in (LaunchState.STARTED, LaunchState.RUNNING)


@dataclass(frozen=True)
class LaunchResult:
    state: LaunchState
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None


class RunState(StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    GONE = "gone"  # never started here, or died without an exit code (killed, node rebooted)


@dataclass(frozen=True)
class ProbeResult:
    state: RunState
    pid: int | None = None
    exit_code: int | None = None
    log_bytes: int | None = None  # None when there is no log file
    reason: str | None = None  # for GONE: no-run | died | rebooted
    notice_at: float | None = None  # epoch seconds of the preemption notice the run got
    progress: Progress | None = None  # the run's progress file; None: none
    # Which notice (instance/preempted or instance/maintenance-event's
    # TERMINATE_ON_HOST_MAINTENANCE); None when the run's watcher did not say.
    notice_kind: NoticeKind | None = None


class CleanupState(StrEnum):
    CLEAN = "clean"  # nothing holds the TPU: safe to relaunch
    BUSY = "busy"  # something survived SIGKILL or still holds the TPU: replace the node


class HealthState(StrEnum):
    """The fleet's health check on a worker, as the cleanup ran it."""

    NONE = "none"  # not configured, or not run (the TPU was busy)
    OK = "ok"
    FAILED = "failed"


@dataclass(frozen=True)
class CleanupResult:
    state: CleanupState
    group: str  # none | terminated (exited on TERM) | killed (needed KILL) | stuck
    holders_killed: int
    lockfile: str  # removed | absent | failed
    busy_pids: tuple[int, ...] = ()
    # False when neither root nor passwordless sudo was available: other users' processes were
    # invisible, so `clean` only speaks for the SSH user's own processes.
    sees_all_processes: bool = True
    # The fleet's health check, run on a free TPU: none (not configured, or the TPU was busy),
    # ok or failed, with its exit code (124: timed out) and the last lines of its output.
    health: HealthState = HealthState.NONE
    health_code: int | None = None
    health_output: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """Safe to relaunch on: nothing holds the TPU and the health check did not fail."""
        return self.state is CleanupState.CLEAN and self.health is not HealthState.FAILED


@dataclass(frozen=True)
class HealthCheck:
    """The fleet's own pre-launch check (`workload.health_check`), run on every worker."""

    command: str
    timeout: float = 60.0


class NoticeWait(StrEnum):
    """What a notice wait waits for (`Launcher.wait_notice`)."""

    NOTICE = "notice"  # the run's watcher wrote `notice`
    STOPPED = "stopped"  # the run stopped (after its notice)


class NoticeState(StrEnum):
    NOTICED = "noticed"  # the run's watcher wrote `notice`; `at` is its epoch seconds
    ENDED = "ended"  # waiting for a notice, the run ended without one
    STOPPED = "stopped"  # the run recorded its exit code, or its wrapper is gone
    TIMEOUT = "timeout"  # nothing within the wait: ask again


@dataclass(frozen=True)
class NoticeResult:
    state: NoticeState
    at: float | None = None


# ---------------------------------------------------------------------------------------------
# The port


class Launcher(Protocol):
    """Runs a slot's workload on its workers. Every method answers as data; none raises for a
    worker it could not reach."""

    # Told when a worker ends its connection by its own doing (its VM shutting down): a hint
    # for the daemon to plan now. Set by the runtime (runtime/workload/jobs.py).
    on_lost: Callable[[WorkerLost], None] | None

    async def locate(self, inc: IncarnationRecord, workers: Sequence[WorkerRecord]) -> Place | str:
        """Where a slice's workers (as recorded) are reached, or why they cannot be."""
        ...

    async def probe(
        self, runs: Sequence[tuple[Place, Run]], *, patient: bool = False, quiet: bool = False,
        only: bool = False,
    ) -> list[list[Reply[ProbeResult]]]:  # fmt: skip
        """The state of each run on every worker of its place, one list per place. `patient`:
        the place's first probe (keep trying a worker that is not up yet, for a while);
        `quiet`: a routine probe (log only failures); `only`: these are every worker the
        daemon knows of (let go of anything held for others)."""
        ...

    async def install(
        self, place: Place, run_id: str, files: Sequence[WorkerFile], secrets: Mapping[str, str]
    ) -> dict[int, str]:
        """Put `files` and the slot's `secrets` on every worker; the workers where it failed,
        and why. The secrets reach the workload's environment at the next `launch`."""
        ...

    async def launch(self, place: Place, launch: Launch) -> list[Reply[LaunchResult]]:
        """Start the attempt on every worker, detached, once per run (a launch into a run that
        exists reports it instead)."""
        ...

    async def cleanup(
        self, place: Place, run: Run | None, health: HealthCheck | None = None
    ) -> list[Reply[CleanupResult]]:
        """Stop `run` (None: no run to stop, a node's first launch) on every worker and free
        the TPU for a launch; then, on a free TPU, run the fleet's `health` check."""
        ...

    async def wait_notice(
        self, place: Place, run: Run, what: NoticeWait, seconds: float
    ) -> NoticeResult | str:
        """Wait on the place's first worker until its run got its preemption notice (`what`
        NOTICE) or stopped (STOPPED), at most `seconds`; or why it could not be asked."""
        ...

    async def signal(self, place: Place, run: Run, signal: str) -> int:
        """Send the run on every worker `signal` (a notice heard on another slice of the job);
        how many runs got it."""
        ...

    async def forget(self, live: set[int]) -> None:
        """Let go of what is held for incarnations not in `live` (pooled connections)."""
        ...

    async def close(self) -> None: ...


# ---------------------------------------------------------------------------------------------
# By hand


@dataclass(frozen=True)
class HandReply:
    """One worker's answer to what a person ran by hand. `status` is what a shell reports
    (the exit status, 128 + the signal, 255 when it could not be run); `completed`: it ran
    to an exit or a signal; `why` says how it ended, in one line (for a failure)."""

    status: int
    completed: bool = True
    why: str = ""
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.completed and self.status == 0


class ByHand(Protocol):
    """What `tpucared logs`, `exec` and `cp` (runtime/workload/by_hand.py) need from whatever
    reaches the workers: the slice's workers as the daemon recorded them (addresses, the host
    keys it pinned; nothing is pinned or written), then one command or file on some of them.
    A worker is named by its place and its index there. Each call opens its own connections
    and raises ValueError when they cannot be opened at all (no key, say: a setting to fix)."""

    def locate(self, inc: IncarnationRecord, workers: Sequence[WorkerRecord]) -> Place | str:
        """Where a slice's workers are reached, or why they cannot be."""
        ...

    async def log(
        self, place: Place, worker: int, run: Run, *, lines: int, follow: bool,
        out: BinaryIO, err: TextIO,
    ) -> HandReply:  # fmt: skip
        """Copy the end of the run's log (`follow`: until interrupted) to `out` and its
        errors to `err` as they come."""
        ...

    async def run(self, workers: Sequence[tuple[Place, int]], command: str) -> list[HandReply]:
        """`command` on every worker given, in parallel; one reply each, in order, with its
        whole output."""
        ...

    async def copy(self, workers: Sequence[tuple[Place, int]], file: WorkerFile) -> list[HandReply]:
        """`file` written on every worker given; one reply each, in order."""
        ...
