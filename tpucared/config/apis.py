"""A fleet's cloud API (`api`: "tpu", "compute", or one a cloud module registers) and the
keys that go with it.

Part of pass two (`build.py` calls it for each fleet). `APIS` is the registry config and
preflight read: each API's `ApiRules` (its name, its own keys, the two that name its nodes,
its rules across keys, whether it queues, the Google service preflight checks). The runtime
adds a cloud's rules with its connector (runtime/clouds.py `register`), so a new cloud edits
neither this file nor preflight. A TPU API fleet names its nodes by
`accelerator_type` and `runtime_version`; a Compute Engine fleet (issue 27: one TPU VM per
slot) by `machine_type` (the known table, core/model/machines.py), an optional `image` and,
for spot capacity, `on_preemption`; issue 28 adds `topology` (a multi-host slice, a pair of
`TOPOLOGIES`) and `capacity = "flex-start"` with its `max_run_duration` (10 minutes to 7
days). Another API's keys on a fleet are one line naming them, whichever are set. `machine`
hands both to the `FleetSpec` in the same two fields, as the Cloud port reads them
(ports/cloud.py `NodeShape`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from tpucared.config.problems import Problems
from tpucared.config.schema import FleetTable
from tpucared.config.syntax import COMPUTE_API, TPU_API, as_written
from tpucared.core.model import durations
from tpucared.core.model.machines import MACHINE_TYPES, TOPOLOGIES, hosts_of
from tpucared.core.model.specs import CapacityKind, Provisioning

Check = Callable[[FleetTable, str, Problems], None]


@dataclass(frozen=True)
class ApiRules:
    """What config and preflight know of one cloud API a fleet may name in `api`."""

    api: str  # the name a fleet gives in `api`, and its Cloud port's key (runtime/clouds.py)
    title: str  # what it is, in messages: "the Cloud TPU API"
    keys: tuple[str, ...]  # its own fleet keys: set on another API's fleet, one problem line
    # The keys that name what a node is and what it boots (`FleetSpec.accelerator_type`
    # and its `extra` software): the first required, the second None for a cloud whose
    # nodes boot what it chooses.
    machine: tuple[str, str | None]
    # Its own rules across keys; None: the common ones (`check_common`).
    check: Check | None = None
    queued: bool = False  # takes provisioning = "queued"
    # The Google service preflight checks is enabled, and with it the project's Google
    # checks of the fleet; None: not a Google API, preflight checks none of its cloud.
    service: str | None = None


def check_api_keys(raw: FleetTable, at: str, problems: Problems) -> None:
    """The rules of the fleet's `api` keys, each broken one added to `problems`."""
    rules = APIS.get(raw.api)
    if rules is None:
        known = " or ".join(f'"{r.api}" ({r.title})' for r in APIS.values())
        problems.add(f"{at}: api", f"expected {known}, got {as_written(raw.api)}")
    elif rules.check is not None:
        rules.check(raw, at, problems)
    else:
        check_common(rules, raw, at, problems)


def check_common(rules: ApiRules, raw: FleetTable, at: str, problems: Problems) -> None:
    """A registered API's rules when it brings none of its own: no other API's keys, no
    queueing unless it queues, its machine key given."""
    others = {k for r in APIS.values() if r.api != rules.api for k in r.keys} - set(rules.keys)
    wrong = _set_keys(raw, sorted(others))
    if wrong:
        problems.add(
            f"{at}: {', '.join(wrong)}",
            f'not for api = "{rules.api}" fleets: they name {" and ".join(rules.keys)}',
        )
    if raw.provisioning is Provisioning.QUEUED and not rules.queued:
        problems.add(
            f"{at}: provisioning",
            f'"queued" is not a feature of {rules.title}: a "{rules.api}" fleet provisions '
            "directly",
        )
    if getattr(raw, rules.machine[0]) is None:
        problems.add(f"{at}: {rules.machine[0]}", f'required for api = "{rules.api}"')


def machine(raw: FleetTable) -> tuple[str, str]:
    """(what the node is, what it boots): the accelerator type and runtime version of a TPU
    API fleet, the machine type and image ("": its generation's default) of a compute one;
    a registered API's own pair (`ApiRules.machine`); ("", "") for an unknown API (its own
    problem)."""
    rules = APIS.get(raw.api)
    if rules is None:
        return "", ""
    what, boots = rules.machine
    return getattr(raw, what) or "", (getattr(raw, boots) or "") if boots else ""


def register_api(rules: ApiRules) -> None:
    """Make `rules.api` a name fleets may give (runtime/clouds.py `register` calls it with
    the cloud's connector); the same rules again are no change, other rules under a known
    name an error."""
    if APIS.setdefault(rules.api, rules) is not rules:
        raise ValueError(f"cloud API {rules.api!r} is registered already")


def unregister_api(api: str) -> None:
    """Forget a registered API (a test's cloud, when the test ends); the built-in two stay."""
    if api not in BUILT_IN:
        APIS.pop(api, None)


# Each API's own keys: the others' are one line, whichever of them are set.
_TPU_KEYS = ("accelerator_type", "runtime_version")
_COMPUTE_KEYS = ("machine_type", "image", "on_preemption", "topology", "reservation_bound")

# A zonal MIG's limits (issue 39, docs/research/compute-engine.md §10 "Limits audit"): its
# `baseInstanceName` ({node}-w-###) is "[a-z]([-a-z0-9]{0,51}-#{1,10}...)": the part before
# `-###` at most 52 characters, so a node name at most 50 (InstanceGroupManager, discovery
# and google-cloud-compute); and "A managed instance group can have up to 1000 VM instances
# per group" (instanceGroupManagers.insert).
MAX_MIG_NODE_NAME = 50
MAX_MIG_SIZE = 1000

# A flex-start run's bounds: Google's resize requests take "between 10m (10 minutes) and 7d
# (7 days)" (docs/research/compute-engine.md §6.9); the generic maxRunDuration's are wider.
MIN_RUN = timedelta(minutes=10)
MAX_RUN = timedelta(days=7)


def _set_keys(raw: FleetTable, keys: Sequence[str]) -> list[str]:
    return [k for k in keys if getattr(raw, k) is not None]


def _check_tpu(raw: FleetTable, at: str, problems: Problems) -> None:
    if raw.capacity is CapacityKind.FLEX_START:
        # One line for the fleet's flex-start, its max_run_duration included.
        problems.add(
            f"{at}: capacity",
            '"flex-start" only on api = "compute" fleets: the TPU API\'s flex-start goes '
            "through queued resources, which tpucared does not support",
        )
    elif raw.max_run_duration is not None:
        problems.add(f"{at}: max_run_duration", _ONLY_FLEX)
    wrong = _set_keys(raw, _COMPUTE_KEYS)
    if wrong:
        # Most likely a Compute Engine fleet without its `api`: say so once, not also that
        # accelerator_type and runtime_version are missing.
        problems.add(
            f"{at}: {', '.join(wrong)}",
            'only for api = "compute" fleets (Compute Engine); a "tpu" fleet (the default) '
            "names accelerator_type and runtime_version",
        )
        return
    for key in _TPU_KEYS:
        if getattr(raw, key) is None:
            problems.add(f"{at}: {key}", "required, but missing")


def _check_compute(raw: FleetTable, at: str, problems: Problems) -> None:
    wrong = _set_keys(raw, _TPU_KEYS)
    if wrong:
        problems.add(
            f"{at}: {', '.join(wrong)}",
            'not for api = "compute" fleets: they name machine_type (and image, to boot '
            "another than the default)",
        )
    if raw.machine_type is None:
        problems.add(
            f"{at}: machine_type",
            f'required for api = "compute": one of {", ".join(MACHINE_TYPES)}',
        )
    if raw.provisioning is Provisioning.QUEUED:
        problems.add(
            f"{at}: provisioning",
            '"queued" is a TPU API feature: a "compute" fleet provisions directly',
        )
    if raw.on_preemption is not None and raw.capacity is not CapacityKind.SPOT:
        problems.add(
            f"{at}: on_preemption",
            f'only for capacity = "spot" (what a preempted spot VM becomes), '
            f'got capacity = "{raw.capacity.value}"',
        )
    _check_topology(raw, at, problems)
    _check_flex(raw, at, problems)
    _check_mig_limits(raw, at, problems)
    if raw.reservation_bound and raw.capacity is not CapacityKind.RESERVED:
        problems.add(
            f"{at}: reservation_bound",
            'only with capacity = "reserved" (a calendar-mode reservation\'s VMs are '
            f'RESERVATION_BOUND), got capacity = "{raw.capacity.value}"',
        )


_ONLY_FLEX = 'only with capacity = "flex-start" (how long a flex-start run lasts)'


def _check_topology(raw: FleetTable, at: str, problems: Problems) -> None:
    """The (machine_type, topology) pair must be one of `TOPOLOGIES`."""
    if raw.topology is None or raw.machine_type is None:
        return
    if hosts_of(raw.machine_type, raw.topology) is None:
        known = ", ".join(TOPOLOGIES.get(raw.machine_type, {})) or "none"
        problems.add(
            f"{at}: topology",
            f'"{raw.topology}" is not a {raw.machine_type} topology: one of {known}',
        )


def _check_mig_limits(raw: FleetTable, at: str, problems: Problems) -> None:
    """A fleet whose slots are MIGs (a multi-host slice, or any flex-start slot) within a
    MIG's limits: its node names and its VMs."""
    hosts = hosts_of(raw.machine_type, raw.topology) if raw.machine_type and raw.topology else 1
    if (hosts or 1) > 1 or raw.capacity is CapacityKind.FLEX_START:
        longest = f"{raw.name}-{max(raw.size - 1, 0)}"
        if len(longest) > MAX_MIG_NODE_NAME:
            problems.add(
                f"{at}: name",
                f"a slot of this fleet is a managed instance group named {raw.name}-<slot>, "
                f"its VMs <name>-w-NNN: at most {MAX_MIG_NODE_NAME} characters, but {longest} "
                f"has {len(longest)}: shorten the name",
            )
    if hosts is not None and hosts > MAX_MIG_SIZE:
        problems.add(
            f"{at}: topology",
            f"{raw.topology} takes {hosts} VMs, more than the {MAX_MIG_SIZE} a managed "
            "instance group holds",
        )


def _check_flex(raw: FleetTable, at: str, problems: Problems) -> None:
    """Flex-start needs its run's length; nothing else takes one."""
    run = raw.max_run_duration
    if raw.capacity is not CapacityKind.FLEX_START:
        if run is not None:
            problems.add(f"{at}: max_run_duration", _ONLY_FLEX)
        return
    if run is None:
        problems.add(
            f"{at}: max_run_duration",
            'required with capacity = "flex-start": how long a run lasts, 10m to 7d',
        )
    elif not MIN_RUN <= run <= MAX_RUN:
        problems.add(f"{at}: max_run_duration", f"expected 10m to 7d, got {durations.fmt(run)}")


def max_run_duration_s(raw: FleetTable) -> int | None:
    """A flex-start `compute` fleet's run length in whole seconds (maxRunDuration's unit)."""
    if raw.api != COMPUTE_API or raw.capacity is not CapacityKind.FLEX_START:
        return None
    run = raw.max_run_duration
    return None if run is None else int(run.total_seconds())


def topology(raw: FleetTable) -> str | None:
    """A `compute` fleet's multi-host topology; None for one VM (none given, or one host)."""
    if raw.api != COMPUTE_API or raw.topology is None:
        return None
    return raw.topology


def on_preemption(raw: FleetTable) -> str | None:
    """What a `compute` fleet's preempted spot VM becomes: "stop" unless told, as Google's
    own TPU spot template does (docs/research/compute-engine.md §2.2): it stays listed as
    TERMINATED, the evidence, until tpucared deletes it."""
    if raw.api != COMPUTE_API or raw.capacity is not CapacityKind.SPOT:
        return None
    return raw.on_preemption or "stop"


def reservation_bound(raw: FleetTable) -> bool | None:
    """Whether a reserved `compute` fleet's VMs are RESERVATION_BOUND: its reservation is a
    calendar-mode one ("For future reservations created in calendar mode, you must also set
    the --provisioning-model flag to reservation-bound", tpu/docs/consume-reservation)."""
    if raw.api != COMPUTE_API or raw.capacity is not CapacityKind.RESERVED:
        return None
    return True if raw.reservation_bound else None


def affinity_value(reservation: str | None, project: str) -> str | None:
    """`projects/P/zones/Z/reservations/R` as reservationAffinity's values take it: the
    name in the fleet's own project, `projects/P/reservations/R` for another's (shared)."""
    if reservation is None:
        return None
    parts = reservation.split("/")
    owner, name = parts[1], parts[5]
    return name if owner == project else f"projects/{owner}/reservations/{name}"


# The two Google APIs tpucared speaks from the start; `register_api` adds others.
TPU = ApiRules(
    TPU_API,
    "the Cloud TPU API",
    keys=_TPU_KEYS,
    machine=("accelerator_type", "runtime_version"),
    check=_check_tpu,
    queued=True,
    service="tpu.googleapis.com",
)
COMPUTE = ApiRules(
    COMPUTE_API,
    "Compute Engine",
    keys=_COMPUTE_KEYS,
    machine=("machine_type", "image"),
    check=_check_compute,
    service="compute.googleapis.com",
)
BUILT_IN = {TPU.api: TPU, COMPUTE.api: COMPUTE}
# Every API a fleet may name, in registration order: the built-in two, then the runtime's.
APIS: dict[str, ApiRules] = dict(BUILT_IN)
