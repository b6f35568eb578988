"""The emulator refuses what Google refuses (issue 39): every request body is checked with
Google's own types before anything else reads it (emulator/tpucared_emulator/compute/official.py,
emulator/tpucared_emulator/official_tpu.py), and the bodies tpucared's own builders make pass.

For each body type: tpucared's body accepted; the same body with an unknown name (at the top
and nested) a 400 `Invalid JSON payload received. Unknown name "..." at '...': Cannot find
field.`; a value of the wrong JSON type a 400 `Invalid value at '...' (TYPE_...)`; an enum value
the type does not list a 400. Also what the official types themselves do, which the checks
rely on: compute_v1's `from_json` takes any string for an enum (its enums are strings), so
the emulator checks names itself; tpu_v2's refuses one.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from emulator_http import Http
from google.cloud import compute_v1, tpu_v2
from google.protobuf import json_format

from tpucared.core.model.specs import FLEET_LABEL, OWNER_LABEL, CapacityKind
from tpucared.gcp.compute import bodies, shared
from tpucared.gcp.compute.slices import mig_body
from tpucared.gcp.tpu.bodies import node_body, queued_resource_body
from tpucared.ports.cloud import NodeShape

P = "strict-project"
ZONE = "us-central1-c"
REGION = "us-central1"
TPU_ZONE = "us-central2-b"
C = f"/compute/v1/projects/{P}"
T = f"/v2/projects/{P}/locations/{TPU_ZONE}"
LABELS = {FLEET_LABEL: "iron", OWNER_LABEL: "lab"}


def compute_shape(**overrides: Any) -> NodeShape:
    fields: dict[str, Any] = {
        "accelerator_type": "tpu7x-standard-4t",
        "extra": {"runtime_version": ""},
        "capacity": CapacityKind.SPOT,
        "labels": LABELS,
        "metadata": {"ssh-keys": "tpucared:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA tpucared"},
    }
    return NodeShape(**{**fields, **overrides})


TPU_SHAPE = NodeShape(
    accelerator_type="v4-8",
    extra={"runtime_version": "tpu-ubuntu2204-base"},
    capacity=CapacityKind.SPOT,
    labels=LABELS,
)


def with_(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A copy of `body` with `value` at `path` (keys and list indices)."""
    out = copy.deepcopy(body)
    node: Any = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


async def refused(http: Http, method: str, path: str, body: Any, message: str) -> dict[str, Any]:
    status, payload = await http(method, path, body)
    assert status == 400, payload
    assert payload["error"]["message"] == message, payload
    return dict(payload["error"])


# -- Compute Engine ----------------------------------------------------------------------------


async def test_an_instance_body_of_ours_passes_and_each_kind_of_wrong_field_is_refused(
    http: Http,
) -> None:
    body = bodies.instance_body(
        compute_shape(), ZONE, "strict-0", reservation=None, boot_disk_gb=100
    )
    where = f"{C}/zones/{ZONE}/instances"
    error = await refused(
        http,
        "POST",
        where,
        {**body, "foo": 1},
        "Invalid JSON payload received. Unknown name \"foo\" at 'resource': Cannot find field.",
    )
    assert error["errors"][0]["reason"] == "badRequest"
    await refused(
        http,
        "POST",
        where,
        with_(body, ("scheduling", "provisioningModell"), "SPOT"),
        'Invalid JSON payload received. Unknown name "provisioningModell" at '
        "'resource.scheduling': Cannot find field.",
    )
    await refused(
        http,
        "POST",
        where,
        with_(body, ("disks", 0, "initializeParams", "sizeGb"), 1),
        'Invalid JSON payload received. Unknown name "sizeGb" at '
        "'resource.disks[0].initializeParams': Cannot find field.",
    )
    error = await refused(
        http,
        "POST",
        where,
        {**body, "canIpForward": "yes"},
        "Invalid value at 'resource.canIpForward' (TYPE_BOOL), \"yes\"",
    )
    assert error["errors"][0]["reason"] == "invalid"
    await refused(
        http,
        "POST",
        where,
        with_(body, ("disks", 0, "initializeParams", "diskSizeGb"), "big"),
        "Invalid value at 'resource.disks[0].initializeParams.diskSizeGb' (TYPE_INT64), \"big\"",
    )
    await refused(
        http,
        "POST",
        where,
        {**body, "labels": {"a": 1}},
        "Invalid value at 'resource.labels[a]' (TYPE_STRING), 1",
    )
    await refused(
        http,
        "POST",
        where,
        {**body, "disks": {"boot": True}},
        "Invalid value at 'resource.disks' (list), {\"boot\": true}",
    )
    await refused(
        http,
        "POST",
        where,
        with_(body, ("scheduling", "provisioningModel"), "CHEAP"),
        "Invalid value for field 'resource.scheduling.provisioningModel': 'CHEAP'.",
    )
    await refused(
        http,
        "POST",
        where,
        with_(body, ("scheduling", "provisioningModel"), "UNDEFINED_PROVISIONING_MODEL"),
        "Invalid value for field 'resource.scheduling.provisioningModel': "
        "'UNDEFINED_PROVISIONING_MODEL'.",
    )
    # Ours, whole: accepted. Output-only fields and snake_case names too, as Google's front end.
    await http.ok("POST", where, body)
    again = {**body, "name": "strict-1", "kind": "compute#instance", "id": "1", "status": "RUNNING"}
    await http.ok("POST", where, again)
    snake = {**body, "name": "strict-2", "can_ip_forward": False}
    await http.ok("POST", where, snake)


async def test_a_policy_a_template_and_a_mig_of_ours_pass_and_unknown_names_are_refused(
    http: Http,
) -> None:
    shape = compute_shape(topology="2x2x4", hosts=4)
    policy = shared.policy_body("lab", "2x2x4")
    policies = f"{C}/regions/{REGION}/resourcePolicies"
    await refused(
        http,
        "POST",
        policies,
        with_(policy, ("workloadPolicy", "hosts"), 4),
        'Invalid JSON payload received. Unknown name "hosts" at '
        "'resource.workloadPolicy': Cannot find field.",
    )
    await refused(
        http,
        "POST",
        policies,
        with_(policy, ("workloadPolicy", "type"), "FAST"),
        "Invalid value for field 'resource.workloadPolicy.type': 'FAST'.",
    )
    await http.ok("POST", policies, policy)

    template = shared.template_body(shape, ZONE, reservation=None, boot_disk_gb=100)
    templates = f"{C}/global/instanceTemplates"
    await refused(
        http,
        "POST",
        templates,
        with_(template, ("properties", "zone"), ZONE),
        'Invalid JSON payload received. Unknown name "zone" at '
        "'resource.properties': Cannot find field.",
    )
    await refused(
        http,
        "POST",
        templates,
        with_(template, ("properties", "labels"), ["a"]),
        "Invalid value at 'resource.properties.labels' (map), [\"a\"]",
    )
    await http.ok("POST", templates, template)

    mig = mig_body(
        "strict-slice",
        shape,
        owner="lab",
        fleet="iron",
        template=f"global/instanceTemplates/{template['name']}",
        policy=f"projects/{P}/regions/{REGION}/resourcePolicies/{policy['name']}",
    )
    migs = f"{C}/zones/{ZONE}/instanceGroupManagers"
    await refused(
        http,
        "POST",
        migs,
        {**mig, "size": 4},
        "Invalid JSON payload received. Unknown name \"size\" at 'resource': Cannot find field.",
    )
    await refused(
        http,
        "POST",
        migs,
        {**mig, "targetSize": "four"},
        "Invalid value at 'resource.targetSize' (TYPE_INT32), \"four\"",
    )
    await refused(
        http,
        "POST",
        migs,
        with_(mig, ("targetSizePolicy",), {"mode": "ALL"}),
        "Invalid value for field 'resource.targetSizePolicy.mode': 'ALL'.",
    )
    await http.ok("POST", migs, mig)


def test_compute_v1_from_json_takes_any_enum_string_and_refuses_unknown_names() -> None:
    """Why official.py checks enum names itself: compute's enums are strings in the proto."""
    parsed = compute_v1.Scheduling.from_json('{"provisioningModel": "CHEAP"}')
    assert parsed.provisioning_model == "CHEAP"
    with pytest.raises(json_format.ParseError, match='no field named "foo"'):
        compute_v1.Instance.from_json('{"foo": 1}', ignore_unknown_fields=False)
    # int64 travels as a decimal string; a number is taken too (proto3 JSON).
    assert compute_v1.Instance.from_json('{"id": "12"}').id == 12
    assert compute_v1.Instance.from_json('{"id": 12}').id == 12


# -- TPU API -----------------------------------------------------------------------------------


async def test_a_node_body_of_ours_passes_and_each_kind_of_wrong_field_is_refused(
    http: Http,
) -> None:
    body = node_body(TPU_SHAPE)
    where = f"{T}/nodes?nodeId=strict-0"
    error = await refused(
        http,
        "POST",
        where,
        with_(body, ("schedulingConfig", "flex"), True),
        'Invalid JSON payload received. Unknown name "flex" at '
        "'node.scheduling_config': Cannot find field.",
    )
    assert error["status"] == "INVALID_ARGUMENT"
    await refused(
        http,
        "POST",
        where,
        {**body, "health": "GREAT"},
        "Invalid value at 'node.health' "
        '(type.googleapis.com/google.cloud.tpu.v2.Node.Health), "GREAT"',
    )
    await refused(
        http, "POST", where, {**body, "tags": "a"}, "Invalid value at 'node.tags' (list), \"a\""
    )
    await refused(
        http,
        "POST",
        where,
        {**body, "createTime": "yesterday"},
        "Invalid value at 'node.create_time' "
        '(type.googleapis.com/google.protobuf.Timestamp), "yesterday"',
    )
    await http.ok("POST", where, body)
    # Enums by number (the official client's way) and the document's newer output-only field
    # (upcomingMaintenance: in the v2 discovery document, not in google-cloud-tpu's proto).
    await http.ok(
        "POST",
        f"{T}/nodes?nodeId=strict-1",
        {**body, "health": 1, "upcomingMaintenance": {"type": "SCHEDULED"}},
    )


async def test_a_queued_resource_of_ours_passes_and_request_messages_are_checked(
    http: Http,
) -> None:
    node = node_body(
        NodeShape(
            accelerator_type="v4-8",
            extra={"runtime_version": "tpu-ubuntu2204-base"},
            capacity=None,
            labels=LABELS,
        )
    )
    body = queued_resource_body(
        P, TPU_ZONE, node=node, capacity=CapacityKind.SPOT, node_id="strict-q"
    )
    where = f"{T}/queuedResources?queuedResourceId=qr-strict"
    await refused(
        http,
        "POST",
        where,
        with_(body, ("tpu", "nodeSpec", 0, "nodeName"), "x"),
        'Invalid JSON payload received. Unknown name "nodeName" at '
        "'queued_resource.tpu.node_spec[0]': Cannot find field.",
    )
    await http.ok("POST", where, body)
    # getGuestAttributes: `name` is the URL's, not a property of the body (the discovery
    # document's GetGuestAttributesRequest has queryPath and workerIds only).
    await http.ok("POST", f"{T}/nodes?nodeId=strict-g", node_body(TPU_SHAPE))
    guest = f"{T}/nodes/strict-g:getGuestAttributes"
    await refused(
        http,
        "POST",
        guest,
        {"name": "x", "queryPath": "hostkeys/"},
        "Invalid JSON payload received. Unknown name \"name\" at '': Cannot find field.",
    )
    await refused(
        http,
        "POST",
        f"{T}/nodes/strict-g:stop",
        {"force": True},
        "Invalid JSON payload received. Unknown name \"force\" at '': Cannot find field.",
    )


def test_tpu_v2_from_json_refuses_an_unknown_enum_name_and_takes_numbers() -> None:
    with pytest.raises(json_format.ParseError, match="Invalid enum value NOPE"):
        tpu_v2.Node.from_json(json.dumps({"state": "NOPE"}), ignore_unknown_fields=False)
    assert tpu_v2.Node.from_json('{"state": 2}').state == tpu_v2.Node.State.READY
    with pytest.raises(json_format.ParseError, match='no field named "upcomingMaintenance"'):
        tpu_v2.Node.from_json('{"upcomingMaintenance": {}}', ignore_unknown_fields=False)
