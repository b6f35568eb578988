"""The pure values of the Compute Engine adapter: paths (names.py), the zonal Operation
(operation.py) and an instance read into an ObservedNode (convert.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tpucared.core.model.observed import StateClass
from tpucared.core.model.specs import ErrorKind
from tpucared.gcp.compute import names
from tpucared.gcp.compute.convert import instance_from_json
from tpucared.gcp.compute.operation import PREEMPTED, Operation
from tpucared.gcp.fields import MalformedResource

ZONE = "us-central1-c"
OP_PATH = "projects/lab/zones/us-central1-c/operations/operation-1"


def test_an_operation_path_round_trips_and_nothing_else_parses() -> None:
    assert names.operation_path("lab", ZONE, "operation-1") == OP_PATH
    assert names.operation_place(OP_PATH) == ("lab", ZONE, "operation-1")
    for bad in (
        "projects/lab/locations/us-central1-c/operations/o",  # a TPU API operation
        "operation-1",
        "projects/lab/zones/us-central1-c/operations/",
        "projects//zones/z/operations/o",
    ):
        with pytest.raises(ValueError, match=r"operation|invalid"):
            names.operation_place(bad)


def test_paths_regions_and_endpoints() -> None:
    assert (
        names.instance_path("lab", ZONE, "iron-0") == f"projects/lab/zones/{ZONE}/instances/iron-0"
    )
    assert names.region_of("us-central1-c") == "us-central1"
    assert names.region_of("us-central1-ai1a") == "us-central1"
    with pytest.raises(ValueError, match="invalid instance name"):
        names.instance_path("lab", ZONE, "a/b")
    assert names.endpoint_for("https://tpu.googleapis.com/") == "https://compute.googleapis.com"
    assert names.endpoint_for("http://127.0.0.1:8471") == "http://127.0.0.1:8471"
    link = f"https://www.googleapis.com/compute/v1/projects/lab/zones/{ZONE}/instances/iron-0"
    assert names.names_instance(link, "lab", ZONE, "iron-0")
    assert not names.names_instance(link, "lab", ZONE, "iron-00")
    assert not names.names_instance(link + "0", "lab", ZONE, "iron-0")


def test_a_running_insert_operation() -> None:
    op = Operation.from_json(
        {
            "kind": "compute#operation",
            "name": "operation-1",
            "operationType": "insert",
            "status": "RUNNING",
            "targetLink": f"https://www.googleapis.com/compute/v1/projects/lab/zones/{ZONE}/"
            "instances/iron-0",
            "insertTime": "2026-11-26T06:00:00.000-08:00",
            "clientOperationId": "6b4e1a5c-2f0d-4d8e-9b7a-1c2d3e4f5a6b",
        },
        "lab",
        ZONE,
    )
    assert op.path == OP_PATH
    assert not op.done
    assert not op.failed
    assert op.exception() is None
    assert op.verb == "create"
    assert op.target == "iron-0"
    assert op.duration_s is None


def test_a_failed_stockout_operation_is_capacity_and_a_delete_is_a_delete() -> None:
    op = Operation.from_json(
        {
            "name": "operation-2",
            "operationType": "insert",
            "status": "DONE",
            "startTime": "2026-11-26T14:00:00Z",
            "endTime": "2026-11-26T14:00:07.5Z",
            "httpErrorStatusCode": 503,
            "httpErrorMessage": "SERVICE UNAVAILABLE",
            "error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no"}]},
        },
        "lab",
        ZONE,
    )
    assert op.failed
    error = op.exception()
    assert error is not None
    assert error.kind is ErrorKind.CAPACITY
    assert op.duration_s == 7.5
    delete = Operation.from_json(
        {"name": "d", "operationType": "delete", "status": "DONE"}, "p", ZONE
    )
    assert delete.verb == "delete"
    assert delete.done
    assert delete.exception() is None
    preempted = Operation.from_json({"name": "s", "operationType": PREEMPTED}, "p", ZONE)
    assert preempted.verb == PREEMPTED


def test_an_empty_error_is_no_error_and_an_unreadable_one_is_refused() -> None:
    op = Operation.from_json({"name": "o", "status": "DONE", "error": {"errors": []}}, "p", ZONE)
    assert op.done
    assert not op.failed
    with pytest.raises(ValueError, match="error is not an object"):
        Operation.from_json({"name": "o", "error": "boom"}, "p", ZONE)
    with pytest.raises(ValueError, match="without a name"):
        Operation.from_json({"status": "DONE"}, "p", ZONE)


def instance(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "iron-0",
        "id": "8123456789012345678",
        "status": "RUNNING",
        "machineType": f"https://www.googleapis.com/compute/v1/projects/lab/zones/{ZONE}/"
        "machineTypes/tpu7x-standard-4t",
        "creationTimestamp": "2026-11-26T06:31:02.123-08:00",
        "labels": {"tpucared-fleet": "iron", "tpucared-owner": "lab"},
        "networkInterfaces": [
            {
                "network": "https://www.googleapis.com/compute/v1/projects/lab/global/networks/default",
                "subnetwork": "regions/us-central1/subnetworks/default",
                "networkIP": "10.128.0.7",
                "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "natIP": "34.1.2.3"}],
            }
        ],
        "serviceAccounts": [{"email": "123-compute@developer.gserviceaccount.com"}],
        "tags": {"items": ["tpu"], "fingerprint": "abc"},
    }
    return {**body, **overrides}


def test_a_running_instance_is_a_usable_node_with_its_addresses() -> None:
    node = instance_from_json(ZONE, instance())
    assert node.name == "iron-0"
    assert node.zone == ZONE
    assert node.state == "RUNNING"
    assert node.state_class is StateClass.USABLE
    assert node.accelerator_type == "tpu7x-standard-4t"
    assert node.owned_by("lab")
    assert node.fleet == "iron"
    assert node.cloud_id == "8123456789012345678"
    assert node.create_time == datetime(2026, 11, 26, 14, 31, 2, 123000, tzinfo=UTC)
    [worker] = node.endpoints
    assert (worker.index, worker.internal_ip, worker.external_ip) == (0, "10.128.0.7", "34.1.2.3")
    assert node.made is not None
    assert node.made.network is not None
    assert node.made.network.endswith("/networks/default")
    assert node.made.service_account == "123-compute@developer.gserviceaccount.com"
    assert node.made.tags == ("tpu",)
    assert node.raw_state is None


def test_terminated_is_dead_and_an_unknown_status_unreadable() -> None:
    assert instance_from_json(ZONE, instance(status="TERMINATED")).state_class is StateClass.DEAD
    node = instance_from_json(ZONE, instance(status="HIBERNATING"))
    assert node.state_class is StateClass.UNREADABLE
    assert node.raw_state == "'HIBERNATING'"


def test_a_provisioning_instance_without_addresses_or_extras() -> None:
    bare = {"name": "iron-1", "status": "PROVISIONING"}
    node = instance_from_json(ZONE, bare)
    assert node.state_class is StateClass.CREATING
    assert node.stuck_rule == "creating"
    assert node.endpoints == ()
    assert node.labels == {}
    internal = instance(networkInterfaces=[{"networkIP": "10.0.0.2"}])
    [worker] = instance_from_json(ZONE, internal).endpoints
    assert worker.external_ip is None


@pytest.mark.parametrize(
    "overrides",
    [
        {"name": None},
        {"name": 7},
        {"labels": [["tpucared-owner", "lab"]]},
        {"labels": {"tpucared-owner": 1}},
        {"networkInterfaces": {"networkIP": "10.0.0.2"}},
        {"networkInterfaces": ["10.0.0.2"]},
        {"networkInterfaces": [{"networkIP": ["10.0.0.2"]}]},
        {"serviceAccounts": "sa"},
        {"tags": {"items": "tpu"}},
        {"id": {"n": 1}},
        {"resourceStatus": "FLEX_START"},
        {"resourceStatus": {"scheduling": ["2026-11-27T02:31:02Z"]}},
    ],
)
def test_a_field_of_the_wrong_type_is_malformed(overrides: dict[str, Any]) -> None:
    with pytest.raises(MalformedResource):
        instance_from_json(ZONE, instance(**overrides))


def test_a_flex_start_vm_waits_then_has_a_planned_end() -> None:
    pending = instance(status="PENDING", scheduling={"provisioningModel": "FLEX_START"})
    node = instance_from_json(ZONE, pending)
    assert node.state_class is StateClass.WAITING
    assert node.run_ends_at is None
    # Google reports the planned end as output only, under resourceStatus (issue 39:
    # compute/docs/instances/limit-vm-runtime, ResourceStatusScheduling).
    end = {"scheduling": {"terminationTimestamp": "2026-11-27T02:31:02Z"}}
    running = instance(scheduling={"provisioningModel": "FLEX_START"}, resourceStatus=end)
    assert instance_from_json(ZONE, running).run_ends_at == datetime(
        2026, 11, 27, 2, 31, 2, tzinfo=UTC
    )
    # `scheduling.terminationTime` is an input (the alternative to maxRunDuration): never
    # read as the run's end.
    intent = {"provisioningModel": "FLEX_START", "terminationTime": "2026-11-27T02:31:02Z"}
    assert instance_from_json(ZONE, instance(scheduling=intent)).run_ends_at is None
    assert instance_from_json(ZONE, instance()).run_ends_at is None  # spot: no planned end
