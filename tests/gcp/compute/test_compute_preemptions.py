"""`ComputeCloud.preemptions` (the optional `PreemptionRecords` of ports/cloud.py) against the
emulator: one zoneOperations.list for every lost VM of a zone, each `compute.instances.preempted`
(or host-maintenance) operation read as the core's `PreemptionRecord` (the instance's name and
id, the operation's time, name and kind); a VM lost without one (`:vanish`) has none, and an
earlier VM of the same name is told apart by its id."""

from __future__ import annotations

import pytest

from tpucared.core.model.observed import RecordKind
from tpucared.core.nodes.preemption import record_of
from tpucared.core.vocab.actions import Loss
from tpucared.gcp.compute import ComputeCloud
from tpucared.gcp.compute.operation import RECORDS_FILTER
from tpucared.ports.cloud import PreemptionRecords

from .support import ZONE, Control, P, finished, shape
from .test_compute_cloud import NOW, running, wait_status

FAST = {"create_seconds": 0.2, "delete_seconds": 0.1, "queued_provision_seconds": 0.1}
MAINTENANCE_TIMING = {"maintenance_event_lead_seconds": 0.05, "maintenance_duration_seconds": 0.5}


def loss(name: str, cloud_id: str | None) -> Loss:
    return Loss(
        api="compute", project=P, zone=ZONE, node_name=name, cloud_id=cloud_id,
        how="vanished", spot=True,
    )  # fmt: skip


async def ids(cloud: ComputeCloud) -> dict[str, str | None]:
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    return {n.name: n.cloud_id for n in observation.nodes}


async def test_one_list_reads_every_lost_vm_of_a_zone(
    cloud: ComputeCloud, control: Control
) -> None:
    assert isinstance(cloud, PreemptionRecords)
    op = await cloud.create(P, ZONE, "iron-0", shape(on_preemption="delete"))
    await finished(cloud, op)
    await running(cloud, "iron-1")
    await running(cloud, "iron-2")
    before = await ids(cloud)
    await control.instance("iron-0", "preempt")
    await control.instance("iron-1", "preempt")
    await control.instance("iron-2", "vanish")
    await wait_status(cloud, "iron-1", "TERMINATED")
    asked = len(await control.requests())
    records = await cloud.preemptions(P, ZONE, ["iron-0", "iron-1", "iron-2"])
    log = (await control.requests())[asked:]
    assert [(r["method"], r["path"].rsplit("/", 1)[-1]) for r in log] == [("GET", "operations")]
    assert log[0]["query"]["filter"] == RECORDS_FILTER
    by_name = {r.name: r for r in records}
    assert sorted(by_name) == ["iron-0", "iron-1"]  # iron-2 vanished with no operation
    for name in ("iron-0", "iron-1"):
        r = by_name[name]
        assert r.cloud_id == before[name]
        assert r.at is not None
        assert r.record.startswith("systemevent-")
        assert r.kind is RecordKind.PREEMPTED
        assert record_of(loss(name, before[name]), records) == r
    assert record_of(loss("iron-2", before["iron-2"]), records) is None
    # Only the names asked for.
    assert await cloud.preemptions(P, ZONE, ["iron-1"]) == (by_name["iron-1"],)


async def test_an_earlier_vm_of_the_same_name_is_not_this_ones(
    cloud: ComputeCloud, control: Control
) -> None:
    op = await cloud.create(P, ZONE, "iron-0", shape(on_preemption="delete"))
    await finished(cloud, op)
    earlier = (await ids(cloud))["iron-0"]
    await control.instance("iron-0", "preempt")
    await wait_status(cloud, "iron-0", None)
    await running(cloud, "iron-0")
    now = (await ids(cloud))["iron-0"]
    assert now != earlier
    records = await cloud.preemptions(P, ZONE, ["iron-0"])
    assert [r.cloud_id for r in records] == [earlier]
    assert record_of(loss("iron-0", now), records) is None
    assert record_of(loss("iron-0", earlier), records) == records[0]


@pytest.mark.parametrize(
    "emulator_options",
    [{**FAST, "compute_spot_maintenance": "host_maintenance", **MAINTENANCE_TIMING}],
)
async def test_a_host_maintenance_termination_is_a_record_of_its_own_kind(
    cloud: ComputeCloud, control: Control
) -> None:
    """A spot VM terminated for host maintenance (the emulator's
    `compute.instances.terminateOnHostMaintenance` operation) is read in the same one list,
    with its kind; a preempted one beside it keeps its own."""
    op = await cloud.create(P, ZONE, "iron-0", shape(on_preemption="stop"))
    await finished(cloud, op)
    await running(cloud, "iron-1")
    window = {"start_in_seconds": 0.1, "duration_seconds": 0.5, "type": "SCHEDULED"}
    await control.instance("iron-0", "schedule-maintenance", window)
    await control.instance("iron-1", "preempt")
    await wait_status(cloud, "iron-0", "TERMINATED")
    await wait_status(cloud, "iron-1", "TERMINATED")
    records = await cloud.preemptions(P, ZONE, ["iron-0", "iron-1"])
    kinds = {r.name: r.kind for r in records}
    assert kinds == {"iron-0": RecordKind.HOST_MAINTENANCE, "iron-1": RecordKind.PREEMPTED}
