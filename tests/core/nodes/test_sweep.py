"""When to sweep shared resources (core/nodes/sweep.py): after a plan moves a multi-host (or
unknown) fleet's node to DELETED on a cloud with `SharedResources`, once per location; at
start, every zone of a multi-host fleet and where nodes of removed fleets live."""

from __future__ import annotations

from tpucared.core.model.records import NodePhase
from tpucared.core.model.specs import CapacityKind, NodeOptions
from tpucared.core.nodes.sweep import after_plan, at_start
from tpucared.core.vocab.actions import Transition
from tpucared.core.vocab.plan import Plan
from tpucared.gcp.compute.cloud import API as COMPUTE_API

from ..core_support import T0, Z1, Z2, inc, spec

P = NodePhase
POD = spec("pod", api=COMPUTE_API, accelerator_type="tpu7x-standard-4t",
           node=NodeOptions(topology="2x2x4"))  # fmt: skip
ONE = spec("one", api=COMPUTE_API, accelerator_type="tpu7x-standard-4t")
TPU = spec("sweep", capacity=CapacityKind.SPOT)
SPECS = {s.name: s for s in (POD, ONE, TPU)}
APIS = frozenset({COMPUTE_API})


def to(incarnation_id: int, new: NodePhase, old: NodePhase = P.DELETING) -> Transition:
    return Transition(
        incarnation_id=incarnation_id, node_name=f"n{incarnation_id}", expected=old, new=new,
        reason="test",
    )  # fmt: skip


NODES = {
    1: inc(1, 0, fleet="pod", zone=Z1, api=COMPUTE_API, phase=P.DELETING),
    2: inc(2, 1, fleet="pod", zone=Z1, api=COMPUTE_API, phase=P.DELETING),
    3: inc(3, 0, fleet="one", zone=Z2, api=COMPUTE_API, phase=P.DELETING),
    4: inc(4, 0, fleet="sweep", zone=Z2, phase=P.DELETING),
    5: inc(5, 0, fleet="gone", zone=Z2, api=COMPUTE_API, phase=P.DELETING),
    6: inc(6, 1, fleet="pod", zone=Z2, api=COMPUTE_API),
}


def test_a_deleted_multi_host_node_sweeps_its_location_once() -> None:
    plan = Plan(T0, actions=(to(1, P.DELETED), to(2, P.DELETED)))
    assert after_plan(plan, NODES, SPECS, APIS) == ((COMPUTE_API, "", Z1),)


def test_no_sweep_for_one_host_a_tpu_node_or_a_delete_not_yet_confirmed() -> None:
    plan = Plan(T0, actions=(to(3, P.DELETED), to(4, P.DELETED), to(6, P.DEAD, P.READY)))
    assert after_plan(plan, NODES, SPECS, APIS) == ()
    # A cloud without SharedResources is never swept.
    assert after_plan(Plan(T0, actions=(to(1, P.DELETED),)), NODES, SPECS, frozenset()) == ()


def test_a_failed_create_of_a_multi_host_node_sweeps_its_location() -> None:
    """Its template or policy may have been made before the group's insert failed."""
    plan = Plan(T0, actions=(to(2, P.FAILED, P.REQUESTED),))
    assert after_plan(plan, NODES, SPECS, APIS) == ((COMPUTE_API, "", Z1),)


def test_a_removed_fleet_s_node_sweeps_its_location() -> None:
    plan = Plan(T0, actions=(to(5, P.DELETED),))
    assert after_plan(plan, NODES, SPECS, APIS) == ((COMPUTE_API, "", Z2),)


def test_at_start_every_multi_host_zone_and_removed_fleets_nodes() -> None:
    assert at_start(SPECS.values(), NODES.values(), APIS) == (
        (COMPUTE_API, "", Z2),
        (COMPUTE_API, "", Z1),
    )
    assert at_start([ONE, TPU], [], APIS) == ()
