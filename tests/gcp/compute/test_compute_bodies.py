"""The instances.insert body from a NodeShape: exactly the JSON issue 27 and the research
notes (docs/research/compute-engine.md §1-2) say, per capacity tier."""

from __future__ import annotations

from typing import Any

import pytest

from tpucared.core.model.specs import CapacityKind, DataDisk, DiskMode
from tpucared.gcp.compute.bodies import default_image, instance_body, scheduling
from tpucared.ports.cloud import NodeShape

ZONE = "us-central1-c"
LABELS = {"tpucared-fleet": "iron", "tpucared-owner": "lab"}


def shape(**overrides: Any) -> NodeShape:
    fields: dict[str, Any] = {
        "accelerator_type": "tpu7x-standard-4t",
        "extra": {"runtime_version": ""},
        "capacity": CapacityKind.SPOT,
        "labels": LABELS,
        "metadata": {"ssh-keys": "tpucared:ssh-ed25519 AAAA tpucared"},
    }
    return NodeShape(**{**fields, **overrides})


def metadata(body: dict[str, Any]) -> dict[str, str]:
    return {i["key"]: i["value"] for i in body["metadata"]["items"]}


def test_a_spot_tpu7x_vm_body() -> None:
    body = instance_body(shape(tags=("tpu",)), ZONE, "iron-0")
    assert body["name"] == "iron-0"
    assert body["machineType"] == "zones/us-central1-c/machineTypes/tpu7x-standard-4t"
    [boot] = body["disks"]
    assert boot["boot"] is True
    assert boot["autoDelete"] is True
    assert boot["initializeParams"] == {
        "sourceImage": "projects/ubuntu-os-accelerator-images/global/images/family/"
        "ubuntu-accel-2404-amd64-tpu-tpu7x",
        "diskSizeGb": "100",
        "diskType": "zones/us-central1-c/diskTypes/hyperdisk-balanced",
    }
    assert body["networkInterfaces"] == [
        {
            "network": "global/networks/default",
            "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}],
        }
    ]
    assert body["serviceAccounts"] == [
        {"email": "default", "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
    ]
    assert metadata(body) == {
        "ssh-keys": "tpucared:ssh-ed25519 AAAA tpucared",
        "enable-guest-attributes": "TRUE",
    }
    assert body["labels"] == LABELS
    assert body["tags"] == {"items": ["tpu"]}
    assert body["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "STOP",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }
    assert "reservationAffinity" not in body
    assert "advancedMachineFeatures" not in body


@pytest.mark.parametrize(
    ("machine_type", "family"),
    [
        ("tpu7x-standard-4t", "ubuntu-accel-2404-amd64-tpu-tpu7x"),
        ("ct6e-standard-1t", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
        ("ct6e-standard-8t", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
        ("ct5p-hightpu-4t", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ],
)
def test_the_default_image_follows_the_generation(machine_type: str, family: str) -> None:
    assert default_image(machine_type).endswith(f"/global/images/family/{family}")
    assert default_image(machine_type).startswith("projects/ubuntu-os-accelerator-images/")


def test_a_named_image_is_sent_as_named_and_an_unknown_generation_needs_one() -> None:
    image = "projects/mine/global/images/my-image"
    body = instance_body(
        shape(accelerator_type="n9-tpu-4t", extra={"runtime_version": image}), ZONE, "a"
    )
    assert body["disks"][0]["initializeParams"]["sourceImage"] == image
    with pytest.raises(ValueError, match="no default image"):
        instance_body(shape(accelerator_type="n9-tpu-4t"), ZONE, "a")


@pytest.mark.parametrize(
    ("machine_type", "disk_type"),
    [
        ("tpu7x-standard-4t", "hyperdisk-balanced"),
        ("ct6e-standard-1t", "hyperdisk-balanced"),
        ("ct6e-standard-8t", "hyperdisk-balanced"),
        # v5p takes Balanced Persistent Disk only (tpu/docs/setup-persistent-disk; issue 39).
        ("ct5p-hightpu-4t", "pd-balanced"),
        ("n9-tpu-4t", None),  # no generation we know: Compute Engine's default
    ],
)
def test_the_boot_disk_is_the_type_its_tpu_generation_takes(
    machine_type: str, disk_type: str | None
) -> None:
    image = "projects/mine/global/images/my-image"
    body = instance_body(
        shape(accelerator_type=machine_type, extra={"runtime_version": image}), ZONE, "a"
    )
    params = body["disks"][0]["initializeParams"]
    expected = None if disk_type is None else f"zones/{ZONE}/diskTypes/{disk_type}"
    assert params.get("diskType") == expected


def test_eight_chip_v6e_gets_one_thread_per_core() -> None:
    body = instance_body(shape(accelerator_type="ct6e-standard-8t"), ZONE, "a")
    assert body["advancedMachineFeatures"] == {"threadsPerCore": 1}


def test_preemption_may_delete_instead_of_stop() -> None:
    body = instance_body(shape(on_preemption="delete"), ZONE, "a")
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"
    with pytest.raises(ValueError, match="on_preemption"):
        scheduling(CapacityKind.SPOT, "hibernate")


def test_on_demand_and_preemptible_tiers() -> None:
    assert scheduling(CapacityKind.ON_DEMAND, None) == {
        "provisioningModel": "STANDARD",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }
    assert scheduling(CapacityKind.PREEMPTIBLE, None)["preemptible"] is True


def test_reserved_names_its_reservation() -> None:
    body = instance_body(shape(capacity=CapacityKind.RESERVED), ZONE, "a", reservation="res-1")
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    assert body["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["res-1"],
    }
    with pytest.raises(ValueError, match="reservation's name"):
        instance_body(shape(capacity=CapacityKind.RESERVED), ZONE, "a")


def test_internal_ip_network_subnetwork_account_and_disks() -> None:
    body = instance_body(
        shape(
            enable_external_ips=False,
            network="lab-net",
            subnetwork="lab-sub",
            service_account="sa@p.iam.gserviceaccount.com",
            service_account_scopes=("scope-a",),
            data_disks=(DataDisk("projects/p/zones/us-central1-c/disks/d", DiskMode.READ_ONLY),),
            description="made by tpucared",
        ),
        ZONE,
        "a",
    )
    assert body["networkInterfaces"] == [
        {
            "network": "global/networks/lab-net",
            "subnetwork": "regions/us-central1/subnetworks/lab-sub",
        }
    ]
    assert body["serviceAccounts"] == [
        {"email": "sa@p.iam.gserviceaccount.com", "scopes": ["scope-a"]}
    ]
    assert body["disks"][1] == {
        "boot": False,
        "autoDelete": False,
        "source": "projects/p/zones/us-central1-c/disks/d",
        "mode": "READ_ONLY",
    }
    assert body["description"] == "made by tpucared"
    full = "projects/p/regions/us-central1/subnetworks/s"
    assert (
        instance_body(shape(subnetwork=full), ZONE, "a")["networkInterfaces"][0]["subnetwork"]
        == full
    )


def test_our_guest_attributes_switch_wins_over_the_shapes_metadata() -> None:
    body = instance_body(shape(metadata={"enable-guest-attributes": "FALSE"}), ZONE, "a")
    assert metadata(body)["enable-guest-attributes"] == "TRUE"


def test_what_compute_engine_cannot_make_is_refused_before_any_request() -> None:
    with pytest.raises(ValueError, match="capacity tier"):
        instance_body(shape(capacity=None), ZONE, "a")
    with pytest.raises(ValueError, match="machine type"):
        instance_body(shape(accelerator_type=""), ZONE, "a")


def test_flex_start_runs_for_its_duration_then_is_deleted() -> None:
    body = instance_body(
        shape(capacity=CapacityKind.FLEX_START, max_run_duration_s=7200), ZONE, "a"
    )
    # Google's own FLEX_START body (ai-hypercomputer/docs/create/create-mig-with-a4-or-a3ultra):
    # no automaticRestart.
    assert body["scheduling"] == {
        "provisioningModel": "FLEX_START",
        "maxRunDuration": {"seconds": "7200"},
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
    }
    assert body["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert "params" not in body  # no requestValidForDuration: it waits until we delete it
    with pytest.raises(ValueError, match="max run duration"):
        instance_body(shape(capacity=CapacityKind.FLEX_START), ZONE, "a")
    with pytest.raises(ValueError, match="max run duration"):
        scheduling(CapacityKind.FLEX_START, None, 0)
