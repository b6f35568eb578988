"""The `[guard]` budget: limits the rest of the config must stay within.

A guard (e.g. the terms of a TRC grant) pins the project and allows only some zones,
accelerator types (TPU API fleets) or machine types (`compute` fleets) and capacity kinds,
and at most so many nodes across all fleets (a multi-host `compute` slice counts its VMs), so
a typo in a fleet cannot spend money.
`build_guard` makes the frozen `GuardConfig` and adds a problem for every fleet or key outside
it; `build.py` calls it with the rest.
"""

from __future__ import annotations

import json

from tpucared.config.apis import APIS, machine
from tpucared.config.problems import Problems
from tpucared.config.schema import ConfigFile, FleetTable, GuardTable
from tpucared.config.syntax import COMPUTE_API, as_written
from tpucared.config.values import GuardConfig
from tpucared.core.model.machines import hosts_of
from tpucared.core.model.specs import CapacityKind


def build_guard(raw: GuardTable | None, root: ConfigFile, problems: Problems) -> GuardConfig | None:
    """The guard, or None without a [guard] table; whatever breaks it goes to `problems`."""
    if raw is None:
        return None
    guard = GuardConfig(
        projects=None if raw.project is None else frozenset(raw.project),
        zones=None if raw.zones is None else frozenset(raw.zones),
        accelerator_types=_kinds(raw.accelerator_types, raw.machine_types),
        machine_types=_kinds(raw.machine_types, raw.accelerator_types),
        capacity=None if raw.capacity is None else frozenset(raw.capacity),
        max_nodes=raw.max_nodes,
    )
    if guard.projects is not None and root.gcp.project not in guard.projects:
        problems.add(
            "gcp.project",
            f"{as_written(root.gcp.project)} is not allowed by the guard "
            f"(allowed: {', '.join(sorted(guard.projects))})",
        )
    for fleet in root.fleet:
        at = f"fleet {json.dumps(fleet.name)}"
        checks: list[tuple[str, list[str], frozenset[str] | None]] = [
            ("project", [fleet.project] if fleet.project else [], guard.projects),
            ("zones", list(fleet.zones), guard.zones),
            _type_check(fleet, guard),
            ("capacity", [fleet.capacity.value], _values(guard.capacity)),
        ]
        for key, wanted, allowed in checks:
            for value in wanted:
                if allowed is not None and value not in allowed:
                    problems.add(
                        f"{at}: {key}",
                        f"{as_written(value)} is not allowed by the guard "
                        f"(allowed: {', '.join(sorted(allowed)) or 'nothing'})",
                    )
    # Every slice is a node: a multislice fleet of size 2 with 4 slices asks for 8; a
    # multi-host `compute` slice is that many VMs, each its own instance (issue 28).
    total = sum(f.size * f.slices * _hosts(f) for f in root.fleet)
    if guard.max_nodes is not None and total > guard.max_nodes:
        sizes = ", ".join(
            f"{f.name} {f.size}"
            + (f"x{f.slices} slices" if f.slices > 1 else "")
            + (f"x{_hosts(f)} hosts" if _hosts(f) > 1 else "")
            for f in root.fleet
        )
        problems.add(
            "guard.max_nodes",
            f"the fleets ask for {total} nodes ({sizes}), more than the {guard.max_nodes} allowed",
        )
    return guard


def _kinds(these: list[str] | None, others: list[str] | None) -> frozenset[str] | None:
    """One list of the guard's machines: naming either list restricts both APIs' fleets, so
    naming only TPU API accelerator types allows no Compute Engine machine type, and the
    other way round (a guard fails closed)."""
    if these is None and others is None:
        return None
    return frozenset(these or ())


def _type_check(
    fleet: FleetTable, guard: GuardConfig
) -> tuple[str, list[str], frozenset[str] | None]:
    """What the fleet's machine is called, by its API, and what the guard allows of it."""
    # The key its API names nodes by (a registered cloud's may be either list's).
    key = APIS[fleet.api].machine[0] if fleet.api in APIS else "accelerator_type"
    allowed = guard.machine_types if key == "machine_type" else guard.accelerator_types
    return (key, [machine(fleet)[0]], allowed)


def _hosts(fleet: FleetTable) -> int:
    """VMs of one slice: a `compute` fleet's topology's (1 for an unknown pair, which is
    its own config error), 1 for a TPU API node."""
    if fleet.api != COMPUTE_API or fleet.machine_type is None:
        return 1
    return hosts_of(fleet.machine_type, fleet.topology) or 1


def _values(kinds: frozenset[CapacityKind] | None) -> frozenset[str] | None:
    return None if kinds is None else frozenset(k.value for k in kinds)
