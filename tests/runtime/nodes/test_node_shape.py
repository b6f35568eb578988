"""`NodeTemplate.shape` (runtime/nodes/calls.py): a fleet's node options become the port's
`NodeShape`, with issue 28's topology, hosts (core/model/machines.py `hosts_of`) and a
flex-start fleet's run length."""

from __future__ import annotations

from tpucared.core.model.specs import CapacityKind, NodeOptions, Provisioning
from tpucared.core.vocab.actions import CreateNode
from tpucared.runtime.nodes.calls import NodeTemplate


def _create(fleet: str, machine: str, capacity: CapacityKind) -> CreateNode:
    return CreateNode(
        fleet=fleet,
        slot=0,
        node_name=f"{fleet}-0",
        zone="us-central1-c",
        accelerator_type=machine,
        extra={"runtime_version": ""},
        capacity=capacity,
        provisioning=Provisioning.DIRECT,
        labels={},
        queued_resource=None,
        attempt=1,
        api="compute",
        reason="slot 0 empty",
    )


def test_a_multi_host_and_a_flex_start_shape() -> None:
    template = NodeTemplate(
        "my-project",
        {},
        True,
        options={
            "iron": NodeOptions(topology="2x2x4", on_preemption="stop"),
            "flex": NodeOptions(max_run_duration_s=3600),
        },
    )
    iron = template.shape(_create("iron", "tpu7x-standard-4t", CapacityKind.SPOT))
    assert (iron.topology, iron.hosts, iron.max_run_duration_s) == ("2x2x4", 4, None)
    flex = template.shape(_create("flex", "ct6e-standard-4t", CapacityKind.FLEX_START))
    assert (flex.topology, flex.hosts, flex.max_run_duration_s) == (None, 1, 3600)
    assert flex.capacity is CapacityKind.FLEX_START
    # A fleet without options: one host, no run length.
    plain = template.shape(_create("sweep", "ct6e-standard-1t", CapacityKind.SPOT))
    assert (plain.topology, plain.hosts, plain.max_run_duration_s) == (None, 1, None)
