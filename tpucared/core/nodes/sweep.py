"""When to sweep a cloud's shared resources: which locations, after which deletes.

A cloud may keep resources beside its nodes that several nodes share (Compute Engine's
multi-host slices, issue 28: an instance template per fleet spec, a workload policy per region
and topology), through the optional port `SharedResources.sweep(project, zone)`
(ports/cloud.py), which deletes those no node uses any more. The runtime
(runtime/nodes/sweeps.py) sweeps a location once a tick's plan confirms a node of a
multi-host fleet there DELETED, or ends its create FAILED (the create may have made the
template or the policy before the group's insert failed) (`after_plan`), once per location
at daemon start (`at_start`: a crash may have left some), and at the end of `tpucared
down`. A fleet gone from the config may have been multi-host: its nodes' locations are swept
too. Pure: the runtime says which cloud APIs have the port.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from tpucared.core.model.records import IncarnationRecord, NodePhase
from tpucared.core.model.specs import FleetSpec
from tpucared.core.vocab.actions import Transition
from tpucared.core.vocab.plan import Plan

Location = tuple[str, str, str]  # (api, project as the core names it, zone)
_ENDED = frozenset({NodePhase.DELETED, NodePhase.FAILED})


def _shares(spec: FleetSpec | None) -> bool:
    """Whether a fleet's nodes may leave shared resources: multi-host, or unknown now."""
    return spec is None or spec.hosts > 1


def after_plan(
    plan: Plan,
    nodes: Mapping[int, IncarnationRecord],
    specs: Mapping[str, FleetSpec],
    apis: Collection[str],
) -> tuple[Location, ...]:
    """The locations to sweep after `plan`: each (api, project, zone) where it moves a node of
    a multi-host fleet (or one gone from the config) to DELETED or FAILED, on a cloud in
    `apis` (those with `SharedResources`); each once, sorted. `nodes`: the live incarnations
    by id."""
    found: set[Location] = set()
    for a in plan.of(Transition):
        inc = nodes.get(a.incarnation_id)
        if a.new not in _ENDED or inc is None or inc.api not in apis:
            continue
        if _shares(specs.get(inc.fleet)):
            found.add((inc.api, inc.project, inc.zone))
    return tuple(sorted(found))


def at_start(
    specs: Iterable[FleetSpec], nodes: Iterable[IncarnationRecord], apis: Collection[str]
) -> tuple[Location, ...]:
    """The locations to sweep once at start (or at the end of `down`): every zone of a
    multi-host fleet on a cloud in `apis`, and where a remembered node of a fleet gone from
    the config lives; each once, sorted."""
    known = {s.name: s for s in specs}
    found: set[Location] = {
        (s.api, s.project, zone) for s in known.values() if s.api in apis and s.hosts > 1
        for zone in s.zones
    }  # fmt: skip
    found |= {(n.api, n.project, n.zone) for n in nodes if n.api in apis and n.fleet not in known}
    return tuple(sorted(found))
