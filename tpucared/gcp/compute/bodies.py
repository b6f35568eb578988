"""The instances.insert body, as a plain JSON dict, from the Cloud port's `NodeShape`.

One single-host TPU VM per slot: a Compute Engine instance of a TPU machine type. Pure
functions, so the exact JSON we send is testable without a server. The shape's fields read
as the port documents them: `accelerator_type` is the machine type (`tpu7x-standard-4t`,
`ct6e-standard-{1,4,8}t`, `ct5p-hightpu-4t`), `software` the boot image ("" for the
default image of the machine type's TPU generation). Sources of every value:
docs/research/compute-engine.md §1-2.

Choices, on purpose:

- The boot disk is the type the machine's TPU generation takes, of `boot_disk_gb`, sent
  explicitly (an image's own size leaves no room for a workload): `hyperdisk-balanced` for
  TPU7x and v6e, `pd-balanced` for v5p, the only type Google lists for it ("TPU support for
  Hyperdisk and Persistent Disk", tpu/docs/setup-persistent-disk; tpu/docs/tpu7x, issue 39).
- `onHostMaintenance: TERMINATE` and `automaticRestart: false` for every tier but
  reservation-bound: TPU VMs cannot live-migrate, and tpucared replaces a VM that stopped
  rather than have it restart under it. Reservation-bound and flex-start VMs get Google's own
  bodies: `automaticRestart: true`, and none (ai-hypercomputer/docs/create/
  create-mig-with-a4-or-a3ultra).
- spot is `provisioningModel: SPOT` with `instanceTerminationAction` from the shape's
  `on_preemption`, STOP unless asked otherwise: a preempted VM then stays listed as
  TERMINATED (the evidence, as a TPU node's PREEMPTED) until the daemon deletes it, as
  Google's own TPU spot template does. on-demand is `STANDARD`; preemptible the legacy
  `preemptible: true`; reserved is `STANDARD` with `reservationAffinity`
  SPECIFIC_RESERVATION on `compute.googleapis.com/reservation-name` = the reservation's name,
  which Compute Engine needs (it has no "any reservation, or fail": ANY_RESERVATION falls
  back to on-demand capacity). A calendar-mode reservation's VMs (`reservation_bound`) are
  `RESERVATION_BOUND` with `instanceTerminationAction: DELETE`: "For future reservations
  created in calendar mode, you must also set the --provisioning-model flag to
  reservation-bound" (tpu/docs/consume-reservation), and every template Google shows for it
  deletes its VMs at the reservation's end (compute/docs/instance-groups/
  bulk-create-instances-in-mig; [3P] TPU7x operators saw STOP refused).
- flex-start is `provisioningModel: FLEX_START` with `maxRunDuration` = the shape's
  `max_run_duration_s` and `instanceTerminationAction: DELETE` (at the run's end the cloud
  deletes the VM: nothing to clean up), and `reservationAffinity: NO_RESERVATION`, as
  SkyPilot sends it (research §6.2, §6.9). No `params.requestValidForDuration`: Google
  documents no default to send, and without one the VM waits PENDING until capacity comes or
  the daemon deletes it.
- One access config (`ONE_TO_ONE_NAT`) unless `enable_external_ips` is false: without one
  the VM has no external address and nobody outside the VPC can SSH into it.
- The service account is `default` (the project's Compute Engine one, what gcloud and the
  TPU API use) unless the shape names one.
- Metadata: the shape's, then ours, `enable-guest-attributes = TRUE`, which makes the guest
  agent publish the SSH host keys that `host_keys` reads.
- A `ct6e-standard-8t` gets `advancedMachineFeatures.threadsPerCore: 1`, as Google's v6e
  guide says it needs.
"""

from __future__ import annotations

from typing import Any

from tpucared.core.model.specs import CapacityKind, DiskMode
from tpucared.gcp.compute import names
from tpucared.ports.cloud import NodeShape

IMAGE_PROJECT = "ubuntu-os-accelerator-images"
# Machine type prefix -> the image family of its TPU generation (research §1.3).
IMAGE_FAMILIES: tuple[tuple[str, str], ...] = (
    ("tpu7x-", "ubuntu-accel-2404-amd64-tpu-tpu7x"),
    ("ct6e-", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("ct5p-", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
)
# Machine type prefix -> the boot disk type of its TPU generation (the module docstring).
BOOT_DISK_TYPES: tuple[tuple[str, str], ...] = (
    ("tpu7x-", "hyperdisk-balanced"),
    ("ct6e-", "hyperdisk-balanced"),
    ("ct5p-", "pd-balanced"),
)
BOOT_DISK_GB = 100
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
ONE_THREAD_PER_CORE = frozenset({"ct6e-standard-8t"})
TERMINATION_ACTIONS = {"stop": "STOP", "delete": "DELETE"}
DEFAULT_ON_PREEMPTION = "stop"
GUEST_ATTRIBUTES = {"enable-guest-attributes": "TRUE"}

_DISK_MODES = {DiskMode.READ_WRITE: "READ_WRITE", DiskMode.READ_ONLY: "READ_ONLY"}


def default_image(machine_type: str) -> str:
    """The image family URL of a TPU machine type's generation; ValueError for a machine
    type of no generation we know (then the fleet must name its image)."""
    for prefix, family in IMAGE_FAMILIES:
        if machine_type.startswith(prefix):
            return f"projects/{IMAGE_PROJECT}/global/images/family/{family}"
    raise ValueError(
        f"no default image for machine type {machine_type!r}: name the image "
        f"(known: {', '.join(p.rstrip('-') for p, _ in IMAGE_FAMILIES)})"
    )


def boot_disk_type(machine_type: str) -> str | None:
    """The boot disk type of a TPU machine type's generation; None for a machine type of no
    generation we know (the config refuses those; left to Compute Engine's default)."""
    for prefix, disk_type in BOOT_DISK_TYPES:
        if machine_type.startswith(prefix):
            return disk_type
    return None


def scheduling(
    capacity: CapacityKind,
    on_preemption: str | None,
    max_run_duration_s: int | None = None,
    *,
    reservation_bound: bool = False,
) -> dict[str, Any]:
    """Instance.scheduling for a capacity tier. ValueError for flex-start without a run
    duration (the adapter reports it as INVALID)."""
    body: dict[str, Any] = {"onHostMaintenance": "TERMINATE", "automaticRestart": False}
    if capacity is CapacityKind.RESERVED and reservation_bound:
        # Google's own body, as it shows it (automaticRestart true included): whether it
        # takes `false` with RESERVATION_BOUND is documented nowhere (research §10, I16).
        body["provisioningModel"] = "RESERVATION_BOUND"
        body["instanceTerminationAction"] = "DELETE"
        body["automaticRestart"] = True
        return body
    if capacity is CapacityKind.FLEX_START:
        if not max_run_duration_s:
            raise ValueError("flex-start capacity needs a max run duration (max_run_duration)")
        # Google's own FLEX_START body has no automaticRestart: none is sent (whether `false`
        # is taken with FLEX_START is documented nowhere, research §10 I16).
        del body["automaticRestart"]
        body["provisioningModel"] = "FLEX_START"
        body["maxRunDuration"] = {"seconds": str(max_run_duration_s)}  # int64: a JSON string
        body["instanceTerminationAction"] = "DELETE"
        return body
    if capacity is CapacityKind.SPOT:
        action = on_preemption or DEFAULT_ON_PREEMPTION
        if action not in TERMINATION_ACTIONS:
            raise ValueError(f"on_preemption must be 'stop' or 'delete', got {action!r}")
        body["provisioningModel"] = "SPOT"
        body["instanceTerminationAction"] = TERMINATION_ACTIONS[action]
    elif capacity is CapacityKind.PREEMPTIBLE:
        body["preemptible"] = True
    else:
        body["provisioningModel"] = "STANDARD"
    return body


def network_url(network: str) -> str:
    """A network as the shape names it (`default`, or a path/URL) as instances.insert takes
    it: a bare name is `global/networks/{name}`."""
    return network if "/" in network else f"global/networks/{network}"


def subnetwork_url(subnetwork: str, zone: str) -> str:
    """A bare subnetwork name is the zone's region's: `regions/{region}/subnetworks/{name}`."""
    if "/" in subnetwork:
        return subnetwork
    return f"regions/{names.region_of(zone)}/subnetworks/{subnetwork}"


def network_interface(shape: NodeShape, zone: str) -> dict[str, Any]:
    """The one network interface: network, subnetwork, an external address unless not."""
    network: dict[str, Any] = {"network": network_url(shape.network or "default")}
    if shape.subnetwork:
        network["subnetwork"] = subnetwork_url(shape.subnetwork, zone)
    if shape.enable_external_ips:
        network["accessConfigs"] = [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]
    return network


def disks(shape: NodeShape, zone: str, image: str, boot_disk_gb: int) -> list[dict[str, Any]]:
    """The boot disk (deleted with the VM), then the shape's data disks (kept)."""
    disk_type = boot_disk_type(shape.accelerator_type)
    params: dict[str, Any] = {
        "sourceImage": image,
        "diskSizeGb": str(boot_disk_gb),  # int64: a JSON string
    }
    if disk_type is not None:
        params["diskType"] = f"zones/{zone}/diskTypes/{disk_type}"
    boot = {
        "boot": True,
        "autoDelete": True,
        "type": "PERSISTENT",
        "initializeParams": params,
    }
    data = [
        {"boot": False, "autoDelete": False, "source": d.source, "mode": _DISK_MODES[d.mode]}
        for d in shape.data_disks
    ]
    return [boot, *data]


def instance_body(
    shape: NodeShape,
    zone: str,
    name: str,
    *,
    reservation: str | None = None,
    boot_disk_gb: int = BOOT_DISK_GB,
) -> dict[str, Any]:
    """An Instance for instances.insert in `zone`. ValueError (before any request) for what
    Compute Engine cannot make: no capacity tier (a queued slot's node), reserved capacity
    without a reservation's name, no machine type, a machine type without a default image
    and no image named."""
    if shape.capacity is None:
        raise ValueError("Compute Engine has no queued resources: a VM needs a capacity tier")
    machine_type = shape.accelerator_type
    if not machine_type:
        raise ValueError("a machine type is required")
    image = shape.software or default_image(machine_type)
    metadata = {**shape.metadata, **GUEST_ATTRIBUTES}
    body: dict[str, Any] = {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/{machine_type}",
        "disks": disks(shape, zone, image, boot_disk_gb),
        "networkInterfaces": [network_interface(shape, zone)],
        "serviceAccounts": [
            {
                "email": shape.service_account or "default",
                "scopes": list(shape.service_account_scopes),
            }
        ],
        "metadata": {"items": [{"key": k, "value": v} for k, v in metadata.items()]},
        "scheduling": scheduling(
            shape.capacity,
            shape.on_preemption,
            shape.max_run_duration_s,
            reservation_bound=shape.reservation_bound,
        ),
    }
    if shape.capacity is CapacityKind.RESERVED:
        if not reservation:
            raise ValueError("reserved capacity on Compute Engine needs the reservation's name")
        body["reservationAffinity"] = {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": RESERVATION_KEY,
            "values": [reservation],
        }
    elif shape.capacity is CapacityKind.FLEX_START:
        body["reservationAffinity"] = {"consumeReservationType": "NO_RESERVATION"}
    if shape.labels:
        body["labels"] = dict(shape.labels)
    if shape.tags:
        body["tags"] = {"items": list(shape.tags)}
    if machine_type in ONE_THREAD_PER_CORE:
        body["advancedMachineFeatures"] = {"threadsPerCore": 1}
    if shape.description:
        body["description"] = shape.description
    return body
