"""The IAM permissions each fleet needs on its project: the one list `tpucared check` tests
(Cloud Resource Manager `projects.testIamPermissions`) and deploy/README.md prints (a test,
tests/preflight/test_preflight_permissions_doc.py, keeps the two the same).

Pure. Sources: the TPU roles page (https://cloud.google.com/iam/docs/roles-permissions/tpu:
`roles/tpu.admin` holds `tpu.nodes.*`, `tpu.operations.*`), the Compute Engine page on the
permissions an instance's create needs ("Required permissions" in
https://cloud.google.com/compute/docs/access/create-enable-service-accounts-for-instances:
`compute.instances.create`, `compute.subnetworks.use`, `compute.subnetworks.useExternalIp`
for an external IP, `compute.instances.setMetadata` / `setTags` / `setLabels` /
`setServiceAccount`, `compute.disks.create` for the boot disk, `compute.images.useReadOnly`),
and what the adapters call (gcp/tpu/client.py, gcp/compute/client.py: every list, get,
operation poll and delete). `iam.serviceAccounts.actAs` is tested on the fleet's service
account itself (checks.py), where a grant may be made, not on the project.
"""

from __future__ import annotations

from collections.abc import Iterable

from tpucared.config.apis import APIS
from tpucared.config.syntax import COMPUTE_API
from tpucared.core.model.specs import FleetSpec, Provisioning

# Group name -> permissions. The names are deploy/README.md's, in the same order.
GROUPS: dict[str, tuple[str, ...]] = {
    "tpu": (
        "tpu.nodes.create",
        "tpu.nodes.delete",
        "tpu.nodes.get",
        "tpu.nodes.list",
        "tpu.operations.get",
    ),
    "tpu-queued": (
        "tpu.queuedResources.create",
        "tpu.queuedResources.delete",
        "tpu.queuedResources.get",
        "tpu.queuedResources.list",
    ),
    "compute": (
        "compute.instances.create",
        "compute.instances.delete",
        "compute.instances.get",
        "compute.instances.list",
        "compute.instances.getGuestAttributes",
        "compute.instances.setMetadata",
        "compute.instances.setLabels",
        "compute.instances.setTags",
        "compute.instances.setServiceAccount",
        "compute.disks.create",
        "compute.images.useReadOnly",
        "compute.subnetworks.use",
        "compute.zoneOperations.get",
        "compute.zoneOperations.list",
        "compute.instanceGroupManagers.list",
    ),
    "compute-external-ip": ("compute.subnetworks.useExternalIp",),
    "compute-slices": (
        "compute.instanceGroupManagers.create",
        "compute.instanceGroupManagers.delete",
        "compute.instanceGroupManagers.get",
        "compute.instanceTemplates.create",
        "compute.instanceTemplates.delete",
        "compute.instanceTemplates.get",
        "compute.instanceTemplates.list",
        "compute.instanceTemplates.useReadOnly",
        "compute.resourcePolicies.create",
        "compute.resourcePolicies.delete",
        "compute.resourcePolicies.get",
        "compute.resourcePolicies.list",
        "compute.resourcePolicies.use",
        "compute.regionOperations.get",
        "compute.globalOperations.get",
    ),
    "compute-data-disks": ("compute.disks.use", "compute.disks.useReadOnly"),
    "os-login": ("compute.instances.osLogin",),
}

# What each group is for, as deploy/README.md introduces it.
WHEN: dict[str, str] = {
    "tpu": 'every fleet of api "tpu"',
    "tpu-queued": 'a "tpu" fleet with provisioning = "queued"',
    "compute": 'every fleet of api "compute"',
    "compute-external-ip": 'a "compute" fleet while ssh.internal_ip = false',
    "compute-slices": 'a "compute" fleet with topology (a multi-host slice) or flex-start',
    "compute-data-disks": 'a "compute" fleet with data_disks',
    "os-login": "ssh.os_login = true",
}


def groups_of(fleet: FleetSpec, *, internal_ip: bool, os_login: bool) -> list[str]:
    """The permission groups one fleet needs (of a cloud that is not Google's: none but OS
    Login's)."""
    if APIS[fleet.api].service is None:
        groups = []
    elif fleet.api != COMPUTE_API:
        groups = ["tpu"]
        if fleet.provisioning is Provisioning.QUEUED:
            groups.append("tpu-queued")
    else:
        groups = ["compute"]
        if not internal_ip:
            groups.append("compute-external-ip")
        if fleet.node.topology is not None or fleet.flex_start:
            groups.append("compute-slices")
        if fleet.node.data_disks:
            groups.append("compute-data-disks")
    if os_login:
        groups.append("os-login")
    return groups


def needed(fleets: Iterable[FleetSpec], *, internal_ip: bool, os_login: bool) -> tuple[str, ...]:
    """Every permission `fleets` (of one project) need, each once, in the groups' order."""
    wanted: set[str] = set()
    for fleet in fleets:
        wanted.update(groups_of(fleet, internal_ip=internal_ip, os_login=os_login))
    return tuple(p for group, perms in GROUPS.items() if group in wanted for p in perms)
