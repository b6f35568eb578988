"""Every preflight check against the emulator, passing and failing (the emulator's
`PUT /_emulator/v1/preflight` makes each fail the way Google answers)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from preflight_support import Control, RunCheck, compute_fleet, emulator_call, load

from bench import daemon_config
from tpucared.config import load_config
from tpucared.preflight import CheckResult, Status, check_config
from tpucared.preflight.permissions import GROUPS
from tpucared_emulator import EmulatorThread

P = daemon_config.PROJECT
ZONE = daemon_config.ZONE
NUMBER_SA = "-compute@developer.gserviceaccount.com"


def statuses(results: dict[str, CheckResult]) -> dict[str, str]:
    return {name: r.status.value for name, r in results.items()}


def test_a_tpu_fleet_passes_every_check(run_check: RunCheck, emu: EmulatorThread) -> None:
    emulator_call(emu.url, "DELETE", "/_emulator/v1/requests")
    results = run_check()
    assert statuses(results) == {
        "credentials": "ok",
        f"project[{P}]": "ok",
        f"api[{P}/tpu.googleapis.com]": "ok",
        f"permissions[{P}]": "ok",
        f"type[sweep/{ZONE}]": "ok",
        f"runtime_version[sweep/{ZONE}]": "ok",
        "network[sweep]": "ok",
        "service_account[sweep]": "ok",
        "quota[sweep/us-central2]": "ok",
        "guard": "ok",
    }
    assert f"all {len(GROUPS['tpu'])} held" in results[f"permissions[{P}]"].detail
    assert NUMBER_SA in results["service_account[sweep]"].detail  # the project's default
    assert results["quota[sweep/us-central2]"].detail == (
        "TPUV4PreemptiblePerProjectPerRegionForTPUAPI in us-central2: 4096, room for 512 v4-8 "
        "at once (8 each; what is in use not counted)"
    )
    # Read-only: every call the emulator logged is a GET.
    logged = emulator_call(emu.url, "GET", "/_emulator/v1/requests")
    assert logged
    assert {r["method"] for r in logged} == {"GET"}


def test_a_compute_fleet_passes_but_its_quota_is_not_readable(run_check: RunCheck) -> None:
    results = run_check(compute_fleet())
    assert statuses(results) == {
        "credentials": "ok",
        f"project[{P}]": "ok",
        f"api[{P}/compute.googleapis.com]": "ok",
        f"permissions[{P}]": "ok",
        "type[tpu7/us-central1-c]": "ok",
        "image[tpu7]": "ok",
        "network[tpu7]": "ok",
        "service_account[tpu7]": "ok",
        "quota[tpu7/us-central1]": "WARN",
        "guard": "ok",
    }
    assert "family/ubuntu-accel-2404-amd64-tpu-tpu7x ->" in results["image[tpu7]"].detail
    assert results["quota[tpu7/us-central1]"].detail == (
        "no spot quota for tpu7x-standard-4t in us-central1 among 0 quotas of "
        "compute.googleapis.com: not checked"
    )


def test_a_missing_project_fails(run_check: RunCheck, control: Control) -> None:
    control(missing=[f"projects/{P}"])
    result = run_check()[f"project[{P}]"]
    assert result.status is Status.FAIL
    assert "does not exist" in result.detail
    assert "gcp.project" in (result.fix or "")


def test_a_project_being_deleted_fails(run_check: RunCheck, control: Control) -> None:
    control(resources={f"projects/{P}": {"lifecycleState": "DELETE_REQUESTED"}})
    result = run_check()[f"project[{P}]"]
    assert result.status is Status.FAIL
    assert "DELETE_REQUESTED" in result.detail


def test_a_disabled_api_fails_with_the_command_that_enables_it(
    run_check: RunCheck, control: Control
) -> None:
    control(disabled_services=["tpu.googleapis.com", "compute.googleapis.com"])
    results = run_check(daemon_config.fleet(), compute_fleet())
    for service in ("tpu.googleapis.com", "compute.googleapis.com"):
        result = results[f"api[{P}/{service}]"]
        assert result.status is Status.FAIL
        assert "DISABLED" in result.detail
        assert result.fix == f"gcloud services enable {service} --project {P}"


def test_missing_permissions_fail_and_are_named(run_check: RunCheck, control: Control) -> None:
    control(denied_permissions=["tpu.nodes.create", "compute.instanceTemplates.create"])
    results = run_check(daemon_config.fleet(), compute_fleet(topology="2x2x2"))
    result = results[f"permissions[{P}]"]
    assert result.status is Status.FAIL
    assert "missing: tpu.nodes.create, compute.instanceTemplates.create" in result.detail
    assert "deploy/README.md" in (result.fix or "")


def test_a_type_not_offered_in_a_zone_fails(run_check: RunCheck) -> None:
    results = run_check(
        daemon_config.fleet(zones=[ZONE, "us-west4-a"]),
        compute_fleet(zones=["us-central1-c", "us-west1-c"]),
    )
    assert results[f"type[sweep/{ZONE}]"].status is Status.OK
    assert results["type[sweep/us-west4-a]"].status is Status.FAIL
    assert "accelerator-types list --zone us-west4-a" in (
        results["type[sweep/us-west4-a]"].fix or ""
    )
    assert results["type[tpu7/us-west1-c]"].status is Status.FAIL
    assert "machine-types list" in (results["type[tpu7/us-west1-c]"].fix or "")


def test_an_unknown_runtime_version_fails(run_check: RunCheck) -> None:
    result = run_check(daemon_config.fleet(runtime_version="tpu-vm-nope"))[
        f"runtime_version[sweep/{ZONE}]"
    ]
    assert result.status is Status.FAIL
    assert "tpu-vm-nope" in result.detail


def test_an_image_that_does_not_resolve_fails(run_check: RunCheck, control: Control) -> None:
    family = "projects/my-images/global/images/family/trainer"
    control(missing=[family])
    result = run_check(compute_fleet(image=family))["image[tpu7]"]
    assert result.status is Status.FAIL
    assert "does not resolve" in result.detail


def test_a_deprecated_or_obsolete_image(run_check: RunCheck, control: Control) -> None:
    image = "projects/my-images/global/images/trainer-v1"
    control(resources={image: {"deprecated": {"state": "DEPRECATED"}}})
    assert run_check(compute_fleet(image=image))["image[tpu7]"].status is Status.WARN
    control(resources={image: {"deprecated": {"state": "OBSOLETE"}}})
    assert run_check(compute_fleet(image=image))["image[tpu7]"].status is Status.FAIL


def test_no_default_network_fails(run_check: RunCheck, control: Control) -> None:
    control(missing=[f"projects/{P}/global/networks/default"])
    result = run_check()["network[sweep]"]
    assert result.status is Status.FAIL
    assert "no default network" in (result.fix or "")


def test_a_named_network_and_subnetwork_pass(run_check: RunCheck, control: Control) -> None:
    subnet = f"projects/{P}/regions/us-central2/subnetworks/tpus"
    control(
        resources={subnet: {"network": f"https://x/compute/v1/projects/{P}/global/networks/vpc"}}
    )
    results = run_check(daemon_config.fleet(network="vpc", subnetwork="tpus"))
    assert results["network[sweep]"].status is Status.OK
    assert results["subnetwork[sweep/tpus]"].status is Status.OK


def test_a_subnetwork_of_another_network_fails(run_check: RunCheck) -> None:
    # The emulator's subnetworks belong to "default" unless told otherwise.
    results = run_check(daemon_config.fleet(network="vpc", subnetwork="tpus"))
    result = results["subnetwork[sweep/tpus]"]
    assert result.status is Status.FAIL
    assert "belongs to default, not vpc" in result.detail


def test_a_missing_subnetwork_or_one_in_another_region_fails(
    run_check: RunCheck, control: Control
) -> None:
    control(missing=[f"projects/{P}/regions/us-central2/subnetworks/tpus"])
    result = run_check(daemon_config.fleet(subnetwork="tpus"))["subnetwork[sweep/tpus]"]
    assert result.status is Status.FAIL
    assert "not found" in result.detail
    elsewhere = f"projects/{P}/regions/europe-west4/subnetworks/tpus"
    result = run_check(daemon_config.fleet(subnetwork=elsewhere))["subnetwork[sweep/tpus]"]
    assert result.status is Status.FAIL
    assert f"not in the region of {ZONE}" in result.detail


def test_the_service_account(run_check: RunCheck, control: Control) -> None:
    email = f"trainer@{P}.iam.gserviceaccount.com"
    fleet = daemon_config.fleet(service_account=email)
    assert run_check(fleet)["service_account[sweep]"].status is Status.OK
    control(missing=[f"projects/-/serviceAccounts/{email}"])
    result = run_check(fleet)["service_account[sweep]"]
    assert result.status is Status.FAIL
    assert "does not exist" in result.detail
    control(resources={f"projects/-/serviceAccounts/{email}": {"disabled": True}})
    assert "is disabled" in run_check(fleet)["service_account[sweep]"].detail
    control(denied_permissions=["iam.serviceAccounts.actAs"])
    result = run_check(fleet)["service_account[sweep]"]
    assert result.status is Status.FAIL
    assert "actAs" in result.detail
    assert "roles/iam.serviceAccountUser" in (result.fix or "")


def test_a_compute_reservation(run_check: RunCheck, control: Control) -> None:
    path = f"projects/{P}/zones/us-central1-c/reservations/mine"
    fleet = compute_fleet(capacity="reserved", reservation=path)
    assert run_check(fleet)["reservation[tpu7]"].status is Status.OK
    control(missing=[path])
    assert run_check(fleet)["reservation[tpu7]"].status is Status.FAIL
    spec = {
        "count": "4",
        "inUseCount": "0",
        "instanceProperties": {"machineType": "ct6e-standard-4t"},
    }
    control(resources={path: {"specificReservation": spec}})
    result = run_check(fleet)["reservation[tpu7]"]
    assert result.status is Status.FAIL
    assert "reserves ct6e-standard-4t" in result.detail
    spec["instanceProperties"] = {"machineType": "tpu7x-standard-4t"}
    spec["inUseCount"] = "4"
    control(resources={path: {"specificReservation": spec}})
    result = run_check(fleet)["reservation[tpu7]"]
    assert result.status is Status.WARN
    assert "0 of 4 VMs free" in result.detail


def test_a_tpu_reservation(run_check: RunCheck, control: Control) -> None:
    path = f"projects/{P}/locations/{ZONE}/reservations/trc"
    fleet = daemon_config.fleet(capacity="reserved", provisioning="queued", reservation=path)
    result = run_check(fleet)["reservation[sweep]"]
    assert result.status is Status.FAIL
    assert "not found among 0" in result.detail
    control(tpu_reservations=[path])
    assert run_check(fleet)["reservation[sweep]"].status is Status.OK


def test_a_data_disk(run_check: RunCheck, control: Control) -> None:
    source = f"projects/{P}/zones/us-central1-c/disks/data"
    fleet = compute_fleet(data_disks=[{"source": source, "mode": "read-only"}])
    result = run_check(fleet)["data_disk[tpu7/data]"]
    assert result.status is Status.OK
    assert "100 GB" in result.detail
    control(missing=[source])
    assert run_check(fleet)["data_disk[tpu7/data]"].status is Status.FAIL


def test_quota(run_check: RunCheck, control: Control) -> None:
    name = "quota[sweep/us-central2]"
    fleet = daemon_config.fleet(accelerator_type="v4-32", size=4)
    preemptible = "TPUV4PreemptiblePerProjectPerRegionForTPUAPI"
    # The region's own value wins over the one every other region gets.
    control(quotas={"tpu.googleapis.com": {preemptible: {"us-central2": 96, "*": 4096}}})
    result = run_check(fleet)[name]
    assert result.status is Status.WARN
    assert f"{preemptible} in us-central2: 96, room for 3 v4-32 at once" in result.detail
    assert result.detail.endswith("; the fleet keeps 4")
    control(quotas={"tpu.googleapis.com": {preemptible: {"us-central2": 0}}})
    result = run_check(fleet)[name]
    assert result.status is Status.FAIL
    assert "cloud.google.com/tpu/docs/quota" in (result.fix or "")
    # On-demand capacity draws on the quota without "Preemptible" (still the default 4096).
    result = run_check(daemon_config.fleet(capacity="on-demand"))[name]
    assert result.status is Status.OK
    assert result.detail.startswith("TPUV4PerProjectPerRegionForTPUAPI in us-central2: 4096")


def test_quota_of_a_compute_slice_counts_its_chips(run_check: RunCheck, control: Control) -> None:
    # No id of Compute Engine's TPU quotas has been seen: matched by the family in the id.
    control(quotas={"compute.googleapis.com": {"TPU7XPreemptibleChipsPerRegion": {"*": 16}}})
    result = run_check(compute_fleet(topology="2x2x2", size=3))["quota[tpu7/us-central1]"]
    assert result.status is Status.WARN
    assert "16, room for 2 tpu7x-standard-4t at once (8 each;" in result.detail


def test_quotas_or_api_states_the_account_may_not_read_warn(
    run_check: RunCheck, control: Control
) -> None:
    control(denied_permissions=["cloudquotas.quotas.get", "serviceusage.services.get"])
    results = run_check()
    quota, api = results["quota[sweep/us-central2]"], results[f"api[{P}/tpu.googleapis.com]"]
    assert quota.status is Status.WARN
    assert "roles/cloudquotas.viewer" in (quota.fix or "")
    assert api.status is Status.WARN
    assert "serviceusage.services.get" in (api.fix or "")


def test_guard(run_check: RunCheck) -> None:
    results = run_check(daemon_config.fleet(size=3), guard={"max_nodes": 10, "zones": [ZONE]})
    assert (
        results["guard"].detail
        == "the fleets ask 3 nodes of the 10 allowed; every fleet is within the guard"
    )
    assert "nothing limits them" in run_check()["guard"].detail


def test_a_hanging_call_costs_only_its_own_check(
    tmp_path: Path, emu: EmulatorThread, control: Control
) -> None:
    control(hang=["quotaInfos.list", "services.get"])
    config = load(tmp_path, emu.url, daemon_config.fleet())
    results = {r.name: r for r in asyncio.run(check_config(config, deadline=0.5))}
    for name in ("quota[sweep/us-central2]", f"api[{P}/tpu.googleapis.com]"):
        assert results[name].status is Status.WARN
        # The request's own timeout or the check's deadline: either way, said and skipped.
        assert results[name].detail.endswith(": not checked")
    others = [r for n, r in results.items() if not n.startswith(("quota", "api"))]
    assert others
    assert all(r.status is Status.OK for r in others)


def test_credentials_that_cannot_load_are_the_one_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Google's endpoint (the config refuses real credentials over an emulator's plain http),
    # and ADC pointed at a file that is not there: nothing is asked of anyone.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "nope.json"))
    config = load_config(daemon_config.write(tmp_path / "fleet.toml", daemon_config.minimal()))
    results = asyncio.run(check_config(config))
    assert [(r.name, r.status) for r in results] == [("credentials", Status.FAIL)]
    assert "no Application Default Credentials" in results[0].detail
    assert "gcloud auth application-default login" in (results[0].fix or "")


def test_each_project_is_checked_for_its_own_fleets(run_check: RunCheck, control: Control) -> None:
    control(missing=["projects/other-grant"], denied_permissions=["compute.instances.osLogin"])
    results = run_check(
        daemon_config.fleet(), daemon_config.fleet("far", project="other-grant"),
        ssh={"os_login": True, "os_login_account": "me@example.com"},
    )  # fmt: skip
    assert results[f"project[{P}]"].status is Status.OK
    assert results["project[other-grant]"].status is Status.FAIL
    assert "api[other-grant/tpu.googleapis.com]" in results
    assert results["network[far]"].detail.startswith("projects/other-grant/global/networks/")
    # OS Login adds its permission to the list; the project that is not there cannot be asked.
    result = results[f"permissions[{P}]"]
    assert result.status is Status.FAIL
    assert result.detail.endswith("missing: compute.instances.osLogin")
    result = results["permissions[other-grant]"]
    assert result.status is Status.WARN
    assert result.detail.startswith("the call failed (permission)")


def test_a_failing_call_costs_only_its_own_check(run_check: RunCheck, emu: EmulatorThread) -> None:
    # Every networks.get answers 503 (the emulator's faults, retried, then given up).
    emulator_call(emu.url, "PUT", "/_emulator/v1/faults", {
        "error_rate": 1.0, "kinds": ["unavailable"], "paths": ["global/networks"],
    })  # fmt: skip
    try:
        results = run_check()
    finally:
        emulator_call(emu.url, "PUT", "/_emulator/v1/faults", {"error_rate": 0.0})
    network = results["network[sweep]"]
    assert network.status is Status.WARN
    assert network.detail.startswith("the call failed (transient): ")
    assert network.detail.endswith(": not checked")
    assert all(r.status is Status.OK for n, r in results.items() if n != "network[sweep]")


def test_a_read_the_account_may_not_make_is_a_warn_not_a_fail(
    run_check: RunCheck, control: Control
) -> None:
    control(denied_permissions=["compute.networks.get", "compute.disks.get"])
    source = f"projects/{P}/zones/us-central1-c/disks/data"
    results = run_check(compute_fleet(data_disks=[{"source": source, "mode": "read-only"}]))
    for name, permission in (("network[tpu7]", "compute.networks.get"),
                             ("data_disk[tpu7/data]", "compute.disks.get")):  # fmt: skip
        assert results[name].status is Status.WARN
        assert results[name].detail.startswith("cannot read the ")
        assert f"Required '{permission}' permission" in results[name].detail
        assert permission in (results[name].fix or "")


def test_fleets_sharing_a_quota_must_fit_in_it_together(
    run_check: RunCheck, control: Control
) -> None:
    control(quotas={"tpu.googleapis.com": {
        "TPUV4PreemptiblePerProjectPerRegionForTPUAPI": {"us-central2": 48},
    }})  # fmt: skip
    results = run_check(
        daemon_config.fleet("a", size=4), daemon_config.fleet("b", size=3),
        daemon_config.fleet("c", capacity="on-demand"),  # another quota
    )  # fmt: skip
    for name, other in (("a", "b"), ("b", "a")):
        result = results[f"quota[{name}/us-central2]"]
        assert result.status is Status.WARN
        assert result.detail.endswith(f"; with {other} the fleets keep 56")
    assert results["quota[c/us-central2]"].status is Status.OK
