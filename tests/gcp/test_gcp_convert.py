"""API JSON -> ObservedNode / ObservedQueuedResource, and the request bodies we send."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tpucared.core.model.observed import WorkerEndpoint
from tpucared.core.model.specs import CapacityKind, ErrorKind
from tpucared.gcp.tpu import bodies
from tpucared.gcp.tpu.bodies import NodeShape
from tpucared.gcp.tpu.convert import (
    node_from_json,
    parse_health,
    parse_state,
    parse_time,
    queued_resource_from_json,
)
from tpucared.gcp.tpu.states import NodeState, QueuedState

ZONE = "us-central2-b"
PARENT = f"projects/my-project/locations/{ZONE}"

READY_POD: dict[str, Any] = {
    "name": f"{PARENT}/nodes/sweep-3",
    "acceleratorType": "v4-16",
    "state": "READY",
    "health": "HEALTHY",
    "runtimeVersion": "tpu-ubuntu2204-base",
    "createTime": "2025-04-10T08:15:30.123456789Z",
    "id": "8123456789012345678",
    "apiVersion": "V2",
    "labels": {"tpucared-fleet": "sweep", "tpucared-owner": "d1", "team": "nlp"},
    "schedulingConfig": {"spot": True},
    "networkEndpoints": [
        {"ipAddress": "10.0.0.2", "port": 8470, "accessConfig": {"externalIp": "34.1.2.3"}},
        {"ipAddress": "10.0.0.3", "port": 8470, "accessConfig": {"externalIp": "34.1.2.4"}},
    ],
    "queuedResource": f"{PARENT}/queuedResources/sweep-3",
}


def test_ready_pod() -> None:
    node = node_from_json(ZONE, READY_POD)
    assert node.name == "sweep-3"
    assert node.zone == ZONE
    assert node.state is NodeState.READY
    assert node.health == "HEALTHY"
    assert node.accelerator_type == "v4-16"
    assert node.extra["runtime_version"] == "tpu-ubuntu2204-base"
    assert node.cloud_id == "8123456789012345678"
    assert node.create_time == datetime(2025, 4, 10, 8, 15, 30, 123456, tzinfo=UTC)
    assert node.endpoints == (
        WorkerEndpoint(0, "10.0.0.2", "34.1.2.3"),
        WorkerEndpoint(1, "10.0.0.3", "34.1.2.4"),
    )
    assert node.queued_resource == f"{PARENT}/queuedResources/sweep-3"
    assert node.fleet == "sweep"
    assert node.owned_by("d1")
    assert not node.owned_by("d2")


def test_creating_node_has_nothing_yet() -> None:
    node = node_from_json(ZONE, {"name": f"{PARENT}/nodes/n", "state": "CREATING"})
    assert node.state is NodeState.CREATING
    assert (node.health, node.create_time, node.cloud_id) == (None, None, None)
    assert node.extra == {}  # no runtime version yet
    assert node.endpoints == ()
    assert node.labels == {}
    assert node.accelerator_type == ""
    assert node.owner is None


def test_endpoints_keep_their_worker_index() -> None:
    data = {
        "name": f"{PARENT}/nodes/n",
        "networkEndpoints": [
            {"port": 8470},  # worker 0 has no address yet
            {"ipAddress": "10.0.0.9"},  # worker 1, internal only
        ],
    }
    assert node_from_json(ZONE, data).endpoints == (WorkerEndpoint(1, "10.0.0.9", None),)


@pytest.mark.parametrize(
    ("value", "state"),
    [
        ("PREEMPTED", NodeState.PREEMPTED),
        ("TERMINATED", NodeState.TERMINATED),
        (11, NodeState.PREEMPTED),
        ("11", NodeState.PREEMPTED),
        (2, NodeState.READY),
        (8, NodeState.STOPPED),
        (7, NodeState.UNRECOGNIZED),  # unused number
        (16, NodeState.UNKNOWN),
        ("SOMETHING_NEW", NodeState.UNRECOGNIZED),
        (None, NodeState.STATE_UNSPECIFIED),
        (True, NodeState.UNRECOGNIZED),
    ],
)
def test_states_by_name_or_number(value: object, state: NodeState) -> None:
    assert parse_state(value) is state


@pytest.mark.parametrize(
    ("value", "health"),
    [
        ("HEALTHY", "HEALTHY"),
        (1, "HEALTHY"),
        (3, "TIMEOUT"),
        (5, "UNHEALTHY_MAINTENANCE"),
        ("UNHEALTHY_TENSORFLOW", "UNHEALTHY_TENSORFLOW"),
        ("HEALTH_UNSPECIFIED", None),
        (0, None),
        (None, None),
    ],
)
def test_health_by_name_or_number(value: object, health: str | None) -> None:
    assert parse_health(value) == health


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-04-10T08:15:30Z", datetime(2025, 4, 10, 8, 15, 30, tzinfo=UTC)),
        ("2025-04-10T08:15:30.5Z", datetime(2025, 4, 10, 8, 15, 30, 500000, tzinfo=UTC)),
        ("2025-04-10T10:15:30+02:00", datetime(2025, 4, 10, 8, 15, 30, tzinfo=UTC)),
        ("2025-04-10T08:15:30", datetime(2025, 4, 10, 8, 15, 30, tzinfo=UTC)),
        ("yesterday", None),
        ("", None),
        (None, None),
    ],
)
def test_rfc3339(text: object, expected: datetime | None) -> None:
    parsed = parse_time(text)
    assert parsed == expected
    if parsed is not None:
        assert parsed.tzinfo is UTC


def test_node_without_name_is_refused() -> None:
    with pytest.raises(ValueError, match="without a name"):
        node_from_json(ZONE, {"state": "READY"})


def test_queued_resource_failed_with_capacity() -> None:
    data = {
        "name": f"{PARENT}/queuedResources/sweep-1",
        "createTime": "2025-04-10T08:00:00Z",
        "spot": {},
        "tpu": {
            "nodeSpec": [
                {
                    "parent": PARENT,
                    "nodeId": "sweep-1",
                    "node": {"acceleratorType": "v4-8", "labels": {"tpucared-fleet": "sweep"}},
                }
            ]
        },
        "state": {
            "state": "FAILED",
            "stateInitiator": "SERVICE",
            "failedData": {
                "error": {"code": 8, "message": 'There is no more capacity in the zone "z"'}
            },
        },
    }
    qr = queued_resource_from_json(ZONE, data)
    assert qr.name == "sweep-1"
    assert qr.state is QueuedState.FAILED
    assert qr.node_names == ("sweep-1",)
    assert qr.labels == {"tpucared-fleet": "sweep"}
    assert qr.fleet == "sweep"
    assert qr.create_time == datetime(2025, 4, 10, 8, tzinfo=UTC)
    assert qr.error is ErrorKind.CAPACITY
    assert qr.error_message is not None
    assert "no more capacity" in qr.error_message


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"state": "ACTIVE"}, QueuedState.ACTIVE),
        ({"state": 9}, QueuedState.WAITING_FOR_RESOURCES),
        ({"state": "FROM_THE_FUTURE"}, QueuedState.STATE_UNSPECIFIED),
        ({}, QueuedState.STATE_UNSPECIFIED),
        (None, QueuedState.STATE_UNSPECIFIED),
    ],
)
def test_queued_states(state: object, expected: QueuedState) -> None:
    qr = queued_resource_from_json(ZONE, {"name": f"{PARENT}/queuedResources/q", "state": state})
    assert qr.state is expected
    assert qr.error is None
    assert qr.node_names == ()


# -- request bodies ------------------------------------------------------------------------------


def test_node_body_defaults_to_external_ips_and_spot() -> None:
    body = bodies.node_body(
        NodeShape(
            accelerator_type="v4-8",
            extra={"runtime_version": "tpu-ubuntu2204-base"},
            capacity=CapacityKind.SPOT,
            labels={"tpucared-fleet": "f"},
            metadata={"ssh-keys": "tpucared:ssh-ed25519 AAAA tpucared"},
            tags=("tpu",),
            service_account="sa@p.iam.gserviceaccount.com",
        )
    )
    assert body == {
        "acceleratorType": "v4-8",
        "runtimeVersion": "tpu-ubuntu2204-base",
        "networkConfig": {"enableExternalIps": True},
        "schedulingConfig": {"spot": True},
        "labels": {"tpucared-fleet": "f"},
        "metadata": {"ssh-keys": "tpucared:ssh-ed25519 AAAA tpucared"},
        "tags": ["tpu"],
        "serviceAccount": {
            "email": "sa@p.iam.gserviceaccount.com",
            "scope": ["https://www.googleapis.com/auth/cloud-platform"],
        },
    }


@pytest.mark.parametrize(
    ("capacity", "scheduling"),
    [
        (CapacityKind.SPOT, {"spot": True}),
        (CapacityKind.PREEMPTIBLE, {"preemptible": True}),
        (CapacityKind.RESERVED, {"reserved": True}),
        (CapacityKind.ON_DEMAND, None),
    ],
)
def test_node_body_capacity(capacity: CapacityKind, scheduling: dict[str, bool] | None) -> None:
    body = bodies.node_body(
        NodeShape(
            accelerator_type="v5litepod-8",
            extra={"runtime_version": "v2-alpha-tpuv5-lite"},
            capacity=capacity,
            enable_external_ips=False,
            network="net",
            subnetwork="sub",
        )
    )
    assert body.get("schedulingConfig") == scheduling
    assert body["networkConfig"] == {
        "enableExternalIps": False,
        "network": "net",
        "subnetwork": "sub",
    }


def test_node_body_requires_type_and_runtime() -> None:
    with pytest.raises(ValueError, match="required"):
        bodies.node_body(NodeShape(accelerator_type="", extra={"runtime_version": "r"}))


@pytest.mark.parametrize(
    ("capacity", "tier"),
    [
        (CapacityKind.SPOT, {"spot": {}}),
        (
            CapacityKind.RESERVED,
            {"reservationName": f"{PARENT}/reservations/-"},
        ),
        (CapacityKind.ON_DEMAND, {}),
    ],
)
def test_queued_resource_body_tiers(capacity: CapacityKind, tier: dict[str, Any]) -> None:
    node = bodies.node_body(NodeShape(accelerator_type="v4-8", extra={"runtime_version": "rt"}))
    body = bodies.queued_resource_body(
        "my-project", ZONE, node_id="sweep-0", node=node, capacity=capacity
    )
    assert body == {
        "tpu": {"nodeSpec": [{"parent": PARENT, "nodeId": "sweep-0", "node": node}]},
        **tier,
    }
    assert "schedulingConfig" not in node


def test_queued_resource_body_options() -> None:
    node = bodies.node_body(NodeShape(accelerator_type="v4-8", extra={"runtime_version": "rt"}))
    body = bodies.queued_resource_body(
        "p",
        ZONE,
        node_id="n",
        node=node,
        capacity=CapacityKind.RESERVED,
        reservation_name="projects/p/locations/z/reservations/mine",
        valid_until_seconds=3600,
    )
    assert body["reservationName"] == "projects/p/locations/z/reservations/mine"
    assert body["queueingPolicy"] == {"validUntilDuration": "3600s"}
    with pytest.raises(ValueError, match="preemptible"):
        bodies.queued_resource_body(
            "p", ZONE, node_id="n", node=node, capacity=CapacityKind.PREEMPTIBLE
        )


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (1.5, "1.5s"), (86400, "86400s")])
def test_duration(seconds: float, text: str) -> None:
    assert bodies.duration(seconds) == text
