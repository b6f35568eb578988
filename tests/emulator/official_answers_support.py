"""What each answer of the answers test (test_official_answers.py) must be: the official type
of every method's answer, and the fields Google fills that a strict parse cannot demand.

`problems(answer, seen)` lists what is wrong with one recorded answer (none for a faithful
one) and adds the (method, path pattern) it matched to `seen`, so the test can tell that every
route of the tables was exercised.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.longrunning import operations_pb2
from google.protobuf import json_format

from tpucared_emulator.compute import official
from tpucared_emulator.errors import ApiError
from tpucared_emulator.official_tpu import check as tpu_check
from tpucared_emulator.projects import project_number

P = "answers-project"
ZONE = "us-central1-c"
REGION = "us-central1"
MACHINE = "tpu7x-standard-4t"
TPU_ZONE = "us-central2-b"
OWNER = "lab"
API = "https://www.googleapis.com/compute/v1"
NOW = datetime(2026, 11, 28, tzinfo=UTC)
OPTIONS = {
    "create_seconds": 0.1,
    "delete_seconds": 0.05,
    "queued_provision_seconds": 0.1,
    "compute_mig_retry_seconds": 0.1,
    "compute_flex_min_run_seconds": 1,
}


@dataclass(frozen=True)
class Answer:
    method: str
    path: str
    status: int
    body: Any
    partial: bool  # the request asked for some fields only (`fields`): Google sends only those


# -- What each answer must be ------------------------------------------------------------------

_Z = rf"projects/{P}/zones/{ZONE}"
_R = rf"projects/{P}/regions/{REGION}"
_G = rf"projects/{P}/global"
_MIG = rf"{_Z}/instanceGroupManagers/[^/]+"
# (method, path below /compute/v1/, compute_v1 message), the first match wins.
COMPUTE = [
    ("POST", rf"{_Z}/instances", "Operation"),
    ("GET", rf"{_Z}/instances", "InstanceList"),
    ("GET", rf"{_Z}/instances/[^/]+", "Instance"),
    ("DELETE", rf"{_Z}/instances/[^/]+", "Operation"),
    ("GET", rf"{_Z}/instances/[^/]+/getGuestAttributes", "GuestAttributes"),
    ("GET", rf"{_Z}/operations", "OperationList"),
    ("GET", rf"({_Z}|{_R}|{_G})/operations/[^/]+", "Operation"),
    ("POST", rf"({_Z}|{_R}|{_G})/operations/[^/]+/wait", "Operation"),
    ("GET", rf"{_Z}/machineTypes/[^/]+", "MachineType"),
    ("POST", rf"{_R}/resourcePolicies", "Operation"),
    ("GET", rf"{_R}/resourcePolicies", "ResourcePolicyList"),
    ("GET", rf"{_R}/resourcePolicies/[^/]+", "ResourcePolicy"),
    ("DELETE", rf"{_R}/resourcePolicies/[^/]+", "Operation"),
    ("POST", rf"{_G}/instanceTemplates", "Operation"),
    ("GET", rf"{_G}/instanceTemplates", "InstanceTemplateList"),
    ("GET", rf"{_G}/instanceTemplates/[^/]+", "InstanceTemplate"),
    ("DELETE", rf"{_G}/instanceTemplates/[^/]+", "Operation"),
    ("POST", rf"{_Z}/instanceGroupManagers", "Operation"),
    ("GET", rf"{_Z}/instanceGroupManagers", "InstanceGroupManagerList"),
    ("GET", _MIG, "InstanceGroupManager"),
    ("DELETE", _MIG, "Operation"),
    ("POST", rf"{_MIG}/listManagedInstances", "InstanceGroupManagersListManagedInstancesResponse"),
]
_T = rf"projects/{P}/locations/{TPU_ZONE}"
# (method, path below /v2/, discovery schema; "Operation" is also google.longrunning's).
TPU = [
    ("GET", rf"projects/{P}/locations", "ListLocationsResponse"),
    ("GET", _T, "Location"),
    ("POST", rf"{_T}:generateServiceIdentity", "GenerateServiceIdentityResponse"),
    ("GET", rf"{_T}/acceleratorTypes", "ListAcceleratorTypesResponse"),
    ("GET", rf"{_T}/acceleratorTypes/[^/]+", "AcceleratorType"),
    ("GET", rf"{_T}/runtimeVersions", "ListRuntimeVersionsResponse"),
    ("GET", rf"{_T}/runtimeVersions/[^/]+", "RuntimeVersion"),
    ("GET", rf"{_T}/nodes", "ListNodesResponse"),
    ("POST", rf"{_T}/nodes", "Operation"),
    ("GET", rf"{_T}/nodes/[^/:]+", "Node"),
    ("DELETE", rf"{_T}/nodes/[^/:]+", "Operation"),
    ("POST", rf"{_T}/nodes/[^/:]+:getGuestAttributes", "GetGuestAttributesResponse"),
    ("GET", rf"{_T}/operations", "ListOperationsResponse"),
    ("GET", rf"{_T}/operations/[^/:]+", "Operation"),
    ("GET", rf"{_T}/queuedResources", "ListQueuedResourcesResponse"),
    ("POST", rf"{_T}/queuedResources", "Operation"),
    ("GET", rf"{_T}/queuedResources/[^/:]+", "QueuedResource"),
    ("DELETE", rf"{_T}/queuedResources/[^/:]+", "Operation"),
]

_DIGITS = re.compile(r"[0-9]+")
_COMPUTE_KINDS = {
    "Instance": "compute#instance",
    "InstanceList": "compute#instanceList",
    "Operation": "compute#operation",
    "OperationList": "compute#operationList",
    "GuestAttributes": "compute#guestAttributes",
    "MachineType": "compute#machineType",
    "ResourcePolicy": "compute#resourcePolicy",
    "ResourcePolicyList": "compute#resourcePolicyList",
    "InstanceTemplate": "compute#instanceTemplate",
    "InstanceTemplateList": "compute#instanceTemplateList",
    "InstanceGroupManager": "compute#instanceGroupManager",
    "InstanceGroupManagerList": "compute#instanceGroupManagerList",
}
# Output fields Google fills on every such resource (the compute v1 reference pages'
# "Output only" fields, as a real `gcloud ... describe --format=json` shows them).
_FILLED = {
    "Instance": (
        "id",
        "creationTimestamp",
        "name",
        "selfLink",
        "zone",
        "machineType",
        "status",
        "cpuPlatform",
        "fingerprint",
        "labelFingerprint",
        "networkInterfaces",
        "disks",
        "scheduling",
        "startRestricted",
        "deletionProtection",
    ),
    "Operation": (
        "id",
        "name",
        "operationType",
        "targetLink",
        "targetId",
        "status",
        "user",
        "progress",
        "insertTime",
        "selfLink",
    ),
    "ResourcePolicy": ("id", "creationTimestamp", "name", "selfLink", "region", "status"),
    "InstanceTemplate": ("id", "creationTimestamp", "name", "selfLink", "properties"),
    "InstanceGroupManager": (
        "id",
        "creationTimestamp",
        "name",
        "selfLink",
        "zone",
        "instanceGroup",
        "instanceTemplate",
        "baseInstanceName",
        "fingerprint",
        "currentActions",
        "status",
        "targetSize",
    ),
    "MachineType": ("id", "creationTimestamp", "name", "selfLink", "zone", "guestCpus", "memoryMb"),
    "InstanceList": ("id", "selfLink"),
    "OperationList": ("id", "selfLink"),
}
FLEX_SLICES = {"iron-2"}  # the scenario's flex-start slot (one VM, a bulk MIG or an instance)
_MANAGED = ("instance", "id", "name", "instanceStatus", "currentAction")
_NODE = (
    "name",
    "acceleratorType",
    "state",
    "runtimeVersion",
    "createTime",
    "id",
    "apiVersion",
    "schedulingConfig",
    "networkConfig",
)


def compute_problems(kind: str, body: Any, partial: bool) -> list[str]:
    out = []
    try:
        official.check(kind, body)
    except ApiError as error:
        out.append(error.message)
    want = _COMPUTE_KINDS.get(kind)
    if want is not None and body.get("kind") != want and not partial:
        out.append(f"kind {body.get('kind')!r}, not {want!r}")
    missing = [f for f in _FILLED.get(kind, ()) if f not in body]
    if missing and not partial:
        out.append(f"no {', '.join(missing)}")
    # A list's id is its collection's path, as Google's; a resource's a decimal int64 string.
    ident = body.get("id")
    if ident is not None and not kind.endswith("List") and not _DIGITS.fullmatch(str(ident)):
        out.append(f"id {ident!r} is not a decimal string")
    if ident is not None and not isinstance(ident, str):
        out.append(f"id {ident!r} is not a string (int64 travels as a string)")
    if kind == "Instance" and not partial:
        out += member_problems(body)
    link = body.get("selfLink")
    if isinstance(link, str) and not link.startswith(f"{API}/projects/{P}/"):
        out.append(f"selfLink {link!r}")
    for item in body.get("items", []) if kind.endswith("List") else ():
        out += compute_problems(kind.removesuffix("List"), item, partial)
    for managed in body.get("managedInstances", []) if not partial else ():
        gap = [f for f in _MANAGED if f not in managed]
        if gap:
            out.append(f"managed instance without {', '.join(gap)}")
        flex = str(managed.get("name", "")).rsplit("-w-", 1)[0] in FLEX_SLICES
        running = managed.get("instanceStatus") == "RUNNING"
        # ManagedInstance.scheduling.terminationTimestamp (compute/docs/instances/
        # limit-vm-runtime; issue 39 bug 4).
        if flex and running and "terminationTimestamp" not in managed.get("scheduling", {}):
            out.append(
                f"{managed.get('name')}: flex member without scheduling.terminationTimestamp"
            )
    return out


def member_problems(instance: dict[str, Any]) -> list[str]:
    """What Google writes on a MIG's member and a flex-start VM, beside the resource's shape."""
    out = []
    items = {i.get("key"): i.get("value") for i in instance.get("metadata", {}).get("items", [])}
    name = str(instance.get("name"))
    if "-w-" in name:  # a slice's member (slices.py's baseInstanceName)
        mig = name.rsplit("-w-", 1)[0]
        # "projects/776293755095/zones/us-west2-b/instanceGroupManagers/..." in a real
        # instance dump (issue 39, bug 1): the project NUMBER.
        want = f"projects/{project_number(P)}/zones/{ZONE}/instanceGroupManagers/{mig}"
        if items.get("created-by") != want:
            out.append(f"{name} created-by {items.get('created-by')!r}, not {want!r}")
    scheduling = instance.get("scheduling", {})
    if scheduling.get("provisioningModel") == "FLEX_START" and instance.get("status") == "RUNNING":
        # "resourceStatus.scheduling.terminationTimestamp" once it runs (compute/docs/instances/
        # limit-vm-runtime, issue 39 bug 4).
        status = instance.get("resourceStatus", {}).get("scheduling", {})
        if "terminationTimestamp" not in status:
            out.append(
                f"{name}: flex-start VM without resourceStatus.scheduling.terminationTimestamp"
            )
    return out


def tpu_problems(schema: str, body: Any, partial: bool) -> list[str]:
    out = []
    try:
        tpu_check(schema, body, "")
    except ApiError as error:
        out.append(error.message)
    if schema == "Operation":
        try:
            json_format.Parse(
                json.dumps(body), operations_pb2.Operation(), ignore_unknown_fields=False
            )
        except json_format.ParseError as error:
            out.append(f"google.longrunning.Operation: {error}")
        metadata = body.get("metadata", {})
        if metadata.get("@type") != "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata":
            out.append(f"metadata {metadata.get('@type')!r}")
    email = body.get("identity", {}).get("email") if schema.startswith("GenerateService") else None
    if (
        email is not None
        and email != f"service-{project_number(P)}@gcp-sa-tpu.iam.gserviceaccount.com"
    ):
        out.append(f"service identity {email!r} (Google: service-PROJECT_NUMBER@gcp-sa-tpu...)")
    for node in [body] if schema == "Node" else body.get("nodes", []) if not partial else []:
        gap = [f for f in _NODE if f not in node]
        if gap:
            out.append(f"node {node.get('name')} without {', '.join(gap)}")
    return out


def problems(answer: Answer, seen: set[str]) -> list[str]:
    if answer.status >= 300:
        return []  # an error envelope is no resource: tests/gcp/test_gcp_errors*.py pin its shape
    if answer.path.startswith("/compute/v1/"):
        tail, table = answer.path.removeprefix("/compute/v1/"), COMPUTE
    else:
        tail, table = answer.path.removeprefix("/v2/"), TPU
    for method, pattern, kind in table:
        if method == answer.method and re.fullmatch(pattern, tail):
            seen.add(f"{method} {pattern}")
            body = answer.body if answer.body is not None else {}
            if table is COMPUTE:
                found = compute_problems(kind, body, answer.partial)
            else:
                found = tpu_problems(kind, body, answer.partial)
            return [f"{answer.method} {tail}: {p}" for p in found]
    return [f"{answer.method} {tail}: no official type known for this answer"]
