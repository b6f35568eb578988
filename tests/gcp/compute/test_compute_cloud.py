"""`ComputeCloud` and `ComputeClient` against the emulator's Compute Engine surface over
loopback: create followed to DONE and observed USABLE, the owner-filtered list over several
pages, a stockout in each of the emulator's modes, delete, both preemption actions, and a
list nobody should act on."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from tpucared.core.model.observed import StateClass
from tpucared.core.model.specs import OWNER_LABEL, ErrorKind
from tpucared.gcp import NoAuth
from tpucared.gcp.compute import ComputeClient, ComputeCloud
from tpucared.gcp.compute.bodies import instance_body
from tpucared.gcp.errors import ApiError, CapacityError, NotFoundError

from .support import MACHINE, OWNER, ZONE, Control, P, finished, shape

NOW = datetime(2026, 11, 26, tzinfo=UTC)


async def running(cloud: ComputeCloud, name: str, fleet: str = "iron") -> None:
    op = await cloud.create(P, ZONE, name, shape(fleet))
    done = await finished(cloud, op)
    assert done.error is None, done.error


async def test_create_is_followed_to_done_and_observed_running_as_usable(
    cloud: ComputeCloud, control: Control
) -> None:
    op = await cloud.create(P, ZONE, "iron-0", shape())
    assert op.name.startswith(f"projects/{P}/zones/{ZONE}/operations/")
    assert op.verb == "create"
    done = await finished(cloud, op)
    assert done.error is None
    assert done.duration_s is not None
    assert done.duration_s >= 0
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.ok, observation.error_message
    [node] = observation.nodes
    assert node.name == "iron-0"
    assert node.state == "RUNNING"
    assert node.state_class is StateClass.USABLE
    assert node.accelerator_type == MACHINE
    assert node.owned_by(OWNER)
    assert node.fleet == "iron"
    assert node.create_time is not None
    [worker] = node.endpoints
    assert worker.index == 0
    assert worker.internal_ip
    assert worker.external_ip  # ONE_TO_ONE_NAT was asked for
    # The insert carried a requestId; the list asked for our owner's instances only.
    log = await control.requests()
    [insert] = [r for r in log if r["method"] == "POST" and r["path"].endswith("/instances")]
    assert insert["query"]["requestId"]
    lists = [r for r in log if r["method"] == "GET" and r["path"].endswith("/instances")]
    assert lists[-1]["query"]["filter"] == f"labels.tpucared-owner={OWNER}"
    # Host keys come from the guest attributes the VM publishes (enable-guest-attributes).
    keys = await cloud.host_keys(P, ZONE, "iron-0")
    assert list(keys) == [0]
    assert all(kind.startswith(("ssh-", "ecdsa-")) and value for kind, value in keys[0])


async def test_a_retried_insert_with_the_same_request_id_makes_one_instance(
    client: ComputeClient,
) -> None:
    body = instance_body(shape(), ZONE, "iron-0")
    request_id = "6b4e1a5c-2f0d-4d8e-9b7a-1c2d3e4f5a6b"
    first = await client.insert_instance(P, ZONE, body, request_id=request_id)
    again = await client.insert_instance(P, ZONE, body, request_id=request_id)
    assert again.name == first.name
    assert again.client_operation_id == request_id
    assert [i["name"] for i in await client.list_instances(P, ZONE)] == ["iron-0"]


async def test_the_list_follows_pages_and_keeps_to_our_owner(
    client: ComputeClient, cloud: ComputeCloud
) -> None:
    for i in range(5):
        await running(cloud, f"iron-{i}")
    other = ComputeCloud(client, owner="someone-else")
    for i in range(2):
        op = await other.create(P, ZONE, f"theirs-{i}", shape("theirs", owner="someone-else"))
        await finished(other, op)
    before = client.request_counts[("instances.list", "200")]
    ours = await client.list_instances(
        P, ZONE, filter=f"labels.tpucared-owner={OWNER}", max_results=2
    )
    assert sorted(i["name"] for i in ours) == [f"iron-{i}" for i in range(5)]
    assert client.request_counts[("instances.list", "200")] - before == 3  # 2 + 2 + 1
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=True)
    assert sorted(n.name for n in observation.nodes) == [f"iron-{i}" for i in range(5)]
    assert observation.queued_resources == ()  # Compute Engine has none
    everyone = ComputeCloud(client, owner=None)
    listed = await everyone.observe(P, ZONE, NOW, queued_resources=False)
    assert len(listed.nodes) == 7


async def test_an_empty_zone_is_empty_not_unknown(cloud: ComputeCloud) -> None:
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.ok
    assert observation.nodes == ()


@pytest.mark.parametrize(
    "stockout_code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"]
)
async def test_a_stockout_in_the_operation_is_capacity(
    cloud: ComputeCloud, control: Control, stockout_code: str
) -> None:
    await control.capacity(0)
    op = await cloud.create(P, ZONE, "iron-0", shape())
    done = await finished(cloud, op)
    assert done.failed
    assert isinstance(done.error, CapacityError)
    assert done.error.kind is ErrorKind.CAPACITY
    assert done.error.status == stockout_code  # the code the emulator was told to answer
    # A failed insert leaves nothing behind.
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.ok
    assert observation.nodes == ()


@pytest.fixture
def emulator_options(
    emulator_options: dict[str, Any], request: pytest.FixtureRequest
) -> dict[str, Any]:
    """A test's `stockout_code` / `stockout_mode` parameters choose the emulator's answer."""
    params = getattr(request.node, "callspec", None)
    chosen = params.params if params is not None else {}
    options = dict(emulator_options)
    if "stockout_code" in chosen:
        options["compute_stockout_code"] = chosen["stockout_code"]
    if "stockout_mode" in chosen:
        options["compute_stockout_mode"] = chosen["stockout_mode"]
    return options


@pytest.mark.parametrize("stockout_mode", ["sync_http", "born_done"])
async def test_a_stockout_answered_at_once_is_capacity_too(
    cloud: ComputeCloud, control: Control, stockout_mode: str
) -> None:
    await control.capacity(0)
    if stockout_mode == "sync_http":
        with pytest.raises(CapacityError):
            await cloud.create(P, ZONE, "iron-0", shape())
        return
    op = await cloud.create(P, ZONE, "iron-0", shape())
    assert op.done
    assert op.error is not None
    assert op.error.kind is ErrorKind.CAPACITY


async def test_delete_removes_the_instance_and_a_second_delete_is_not_found(
    cloud: ComputeCloud,
) -> None:
    await running(cloud, "iron-0")
    op = await cloud.delete(P, ZONE, "iron-0")
    assert op.verb == "delete"
    done = await finished(cloud, op)
    assert done.error is None
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.nodes == ()
    with pytest.raises(NotFoundError):
        await cloud.delete(P, ZONE, "iron-0")


async def wait_status(cloud: ComputeCloud, name: str, want: str | None) -> None:
    """Until instance `name` shows status `want` (None: is gone)."""
    for _ in range(300):
        observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
        assert observation.ok
        states = {n.name: n.state for n in observation.nodes}
        if states.get(name) == want:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never showed {want}: {states}")


async def test_a_spot_vm_preempted_with_stop_is_terminated_and_dead(
    cloud: ComputeCloud, control: Control
) -> None:
    await running(cloud, "iron-0")
    assert await cloud.preemption(P, ZONE, "iron-0") is None
    await control.instance("iron-0", "preempt")
    await wait_status(cloud, "iron-0", "TERMINATED")
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    [node] = observation.nodes
    assert node.state_class is StateClass.DEAD
    evidence = await cloud.preemption(P, ZONE, "iron-0")
    assert evidence is not None
    assert evidence.target == "iron-0"
    assert evidence.done


async def test_a_spot_vm_preempted_with_delete_vanishes(
    cloud: ComputeCloud, control: Control
) -> None:
    op = await cloud.create(P, ZONE, "iron-0", shape(on_preemption="delete"))
    await finished(cloud, op)
    await running(cloud, "iron-1")
    await control.instance("iron-0", "preempt")
    await wait_status(cloud, "iron-0", None)
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert [n.name for n in observation.nodes] == ["iron-1"]
    evidence = await cloud.preemption(P, ZONE, "iron-0")
    assert evidence is not None
    assert evidence.target == "iron-0"
    assert await cloud.preemption(P, ZONE, "iron-1") is None


@pytest.mark.parametrize("mode", ["error_envelope", "not_json", "redirect"])
async def test_a_list_nobody_should_act_on_makes_the_zone_unknown(
    cloud: ComputeCloud, control: Control, mode: str
) -> None:
    await running(cloud, "iron-0")
    await control.faults(script=[{"kind": "malformed", "mode": mode}] * 6, paths=["instances"])
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert not observation.ok
    assert observation.error is ErrorKind.MALFORMED
    assert observation.nodes == ()


async def test_a_failed_list_makes_the_zone_unknown(cloud: ComputeCloud, control: Control) -> None:
    await control.faults(script=[{"kind": "permission"}], paths=["instances"])
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.error is ErrorKind.PERMISSION


async def test_what_compute_engine_cannot_make_is_invalid_before_any_request(
    cloud: ComputeCloud, client: ComputeClient
) -> None:
    for call in (
        cloud.create(P, ZONE, "iron-0", shape(), queued="iron-0"),
        cloud.create(P, ZONE, "iron-0", shape(), slices=2),
        cloud.create(P, ZONE, "iron-0", shape(accelerator_type="n9-standard-4")),
    ):
        with pytest.raises(ApiError) as caught:
            await call
        assert caught.value.kind is ErrorKind.INVALID
    assert not client.request_counts
    with pytest.raises(NotFoundError):
        await cloud.poll("projects/p/locations/z/operations/o")


async def test_an_insert_whose_answer_was_lost_is_retried_with_its_request_id(
    cloud: ComputeCloud, client: ComputeClient, control: Control
) -> None:
    # The first insert takes effect and its answer is lost; the retry sends the same
    # requestId and gets the same operation: one instance, no alreadyExists.
    await control.faults(
        script=[{"kind": "internal", "after": True}], paths=["instances"], methods=["POST"]
    )
    op = await cloud.create(P, ZONE, "iron-0", shape())
    assert (await finished(cloud, op)).error is None
    inserts = [
        r
        for r in await control.requests()
        if r["method"] == "POST" and r["path"].endswith("/instances")
    ]
    assert [r["status"] for r in inserts] == [500, 200]
    assert inserts[0]["query"]["requestId"] == inserts[1]["query"]["requestId"]
    assert [i["name"] for i in await client.list_instances(P, ZONE)] == ["iron-0"]


async def test_get_wait_and_an_unchanged_list_read_once(
    cloud: ComputeCloud, client: ComputeClient
) -> None:
    body = instance_body(shape(), ZONE, "iron-0")
    op = await client.insert_instance(P, ZONE, body)
    waited = await client.wait_operation(P, ZONE, op.name)
    while not waited.done:  # wait may return before DONE: callers loop
        waited = await client.wait_operation(P, ZONE, op.name)
    assert waited.error is None
    instance = await client.get_instance(P, ZONE, "iron-0")
    assert instance["status"] == "RUNNING"
    assert instance["labels"][OWNER_LABEL] == OWNER
    first = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    again = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    # An unchanged page is not parsed again, an unchanged instance not converted again.
    assert again.nodes[0] is first.nodes[0]
    with pytest.raises(NotFoundError):
        await client.get_instance(P, ZONE, "iron-9")


async def test_os_login_goes_over_the_compute_clients_request_path(
    cloud: ComputeCloud, client: ComputeClient
) -> None:
    account = "tpucared@lab-project.iam.gserviceaccount.com"
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGQbyfYfWBaZxTfpaVZ5nBl0WnCRCzQfHc3bnB4Tjv1s lab"
    profile = await cloud.oslogin.import_key(account, key, expires=None)
    assert profile.username
    assert [k.blob for k in profile.keys] == [key.split()[1]]
    assert client.request_counts[("oslogin.importSshPublicKey", "200")] == 1


def test_the_endpoints_are_googles_unless_the_tpu_api_is_an_emulator() -> None:
    google = ComputeCloud.connect("https://tpu.googleapis.com", token_source=NoAuth(), owner=None)
    assert google.client.endpoint == "https://compute.googleapis.com"
    local = ComputeCloud.connect("http://127.0.0.1:8471", token_source=NoAuth(), owner="lab")
    assert local.client.endpoint == "http://127.0.0.1:8471"
    assert local.owner == "lab"


@pytest.mark.parametrize("mode", ["labels_list", "duplicate", "endless_pages", "deep_json"])
async def test_a_hostile_instance_list_makes_the_zone_unknown_and_deletes_nothing(
    cloud: ComputeCloud, control: Control, mode: str
) -> None:
    await running(cloud, "iron-0")
    await control.faults(
        script=[{"kind": "malformed", "mode": mode}] * 300, paths=["instances"], methods=["GET"]
    )
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.error is ErrorKind.MALFORMED, observation
    assert observation.nodes == ()


async def test_an_instance_status_nobody_knows_is_unreadable_not_dead(
    cloud: ComputeCloud, control: Control
) -> None:
    await running(cloud, "iron-0")
    await control.faults(
        script=[{"kind": "malformed", "mode": "state", "value": "HIBERNATING"}],
        paths=["instances"],
        methods=["GET"],
    )
    observation = await cloud.observe(P, ZONE, NOW, queued_resources=False)
    assert observation.ok
    [node] = observation.nodes
    assert node.state_class is StateClass.UNREADABLE
    assert node.raw_state == "'HIBERNATING'"
