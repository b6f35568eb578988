"""The capacity benchmark on Compute Engine (`--api compute`): what a participant's fleet is
there (the daemon's `[[fleet]] api = "compute"` keys) and the emulator's side of a stockout
(capacity of the zone's machine type, its RUNNING VMs preempted, READY read as RUNNING, the
VMs' inserts as the service recorded them).

Every zone is the emulator's `compute_offerings` of one machine type, `tpu7x-standard-4t`
(one host, so a slot is one VM, as bench/recovery_compute.py's "compute" variant). Spot VMs
keep the default `on_preemption = "stop"`: a preempted VM turns TERMINATED and keeps its name
until deleted, so a hunter must delete it before it inserts again (the daemon does, and so
does the gcloud loop of bench/replay_compute.py). A "flex-start" group is the daemon's
Dynamic Workload Scheduler slot: a bulk MIG of one VM that waits for capacity on the cloud's
side, as a queued resource does on the TPU API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from bench.detection import PROJECT, Cloud
from bench.replay_compute import MACHINE

if TYPE_CHECKING:
    from tpucared_emulator.compute.book import ComputeBook
    from tpucared_emulator.state import EmulatorState

# Flex-start's shortest run (docs/daemon.md: 10 minutes to 7 days): longer than any sample,
# whose stockout preempts the VM and so starts the run again.
FLEX_RUN = "10m"


def fleet_keys(capacity: str) -> dict[str, Any]:
    """Laid over bench/daemon_config.py's TPU fleet: one VM of MACHINE per slot."""
    keys: dict[str, Any] = {
        "api": "compute",
        "accelerator_type": None,
        "runtime_version": None,
        "machine_type": MACHINE,
        "capacity": capacity,
    }
    if capacity == "flex-start":
        keys["max_run_duration"] = FLEX_RUN
    else:
        keys["on_preemption"] = "stop"
    return keys


def _book(state: EmulatorState) -> ComputeBook:
    """The state's Compute Engine book (typed as the hook's protocol on the state)."""
    return cast("ComputeBook", state.vms)


def set_capacity(cloud: Cloud, zone: str, available: int | None) -> float:
    """The zone's capacity of MACHINE now (None: unlimited); the emulator's time of it."""

    def act(state: EmulatorState) -> float:
        state.set_capacity(zone, MACHINE, available)
        return state.now()

    return float(cloud.thread.call(act))


def instances(cloud: Cloud, zone: str) -> dict[str, str]:
    """VM name -> status, of the zone."""
    return dict(
        cloud.thread.call(
            lambda s: [(i.name, i.status) for i in _book(s).instances.values() if i.zone == zone]
        )
    )


def zone_running(cloud: Cloud, zone: str, size: int) -> bool:
    """READY on Compute Engine: `size` VMs in the zone, every one RUNNING."""
    states = instances(cloud, zone)
    return len(states) == size and all(s == "RUNNING" for s in states.values())


def preempt_running(cloud: Cloud, zone: str) -> None:
    """Preempt every RUNNING VM of the zone now, with no notice (the control API's
    `:preempt`, which records the `compute.instances.preempted` operation)."""

    def act(state: EmulatorState) -> None:
        for inst in list(_book(state).instances.values()):
            if inst.zone == zone and inst.status == "RUNNING":
                _book(state).preempt(PROJECT, zone, inst.name, None)

    cloud.thread.call(act)


def created_at(cloud: Cloud, zone: str) -> dict[str, float]:
    """VM name -> its creation on the emulator's clock: for a flex-start MIG's member, the
    instant the MIG found the capacity and made it (served from the queue at once)."""
    return dict(
        cloud.thread.call(
            lambda s: [
                (i.name, i.create_time) for i in _book(s).instances.values() if i.zone == zone
            ]
        )
    )


def inserts(cloud: Cloud, zone: str, since: float) -> list[dict[str, Any]]:
    """Every instances.insert of the zone since `since` as the service recorded it (its
    operation: the VM's name, which the request log does not keep, the POST's instant and
    whether it failed), oldest first."""

    def read(state: EmulatorState) -> list[dict[str, Any]]:
        return [
            {
                "name": str(op.target_link).rsplit("/", 1)[1],
                "time": op.insert_time,
                "error": None if op.error is None else op.error.code,
                "done": op.done,
            }
            for op in _book(state).ops.values()
            if op.zone == zone
            and op.operation_type == "insert"
            and op.user != "system"
            and "/instances/" in str(op.target_link)
            and op.insert_time >= since
        ]

    return sorted(cloud.thread.call(read), key=lambda i: i["time"])
