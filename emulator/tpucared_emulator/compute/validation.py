"""Checking an instances.insert request the way compute v1 does, before anything changes.

`instance_body()` takes the JSON body and returns the spec the instance keeps, or raises 400
with compute's wording (`Invalid value for field 'resource.name': ...`, `Required field
'resource.disks' not specified`). What it checks is what tpucared sends (docs/research/
compute-engine.md section 2.1): the name (RFC 1035, 1-63 characters), the machine type (a
partial `zones/{z}/machineTypes/{mt}` or a full URL, of this zone, a TPU machine type offered
there), one boot disk built from `initializeParams.sourceImage`, the network interfaces, at most
one service account, metadata items (key pattern, no duplicates), labels, tags, scheduling
(provisioningModel, instanceTerminationAction, onHostMaintenance) and reservationAffinity.
A FLEX_START VM needs `maxRunDuration` of 600 s to 7 days (the flex-start bounds, research
section 9 row 18; the floor is `compute_flex_min_run_seconds` for tests) and the DELETE
termination action, and may carry `params.requestValidForDuration` (how long it waits).
`request_id()` checks a requestId (a UUID, not the zero one). `properties()` and
`template_machine_type()` check an instance template's properties the same way.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from tpucared_emulator.catalog import MACHINE_TYPES, Catalog, MachineType
from tpucared_emulator.compute import errors

NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_NAME_RULE = "Must be a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'"
_METADATA_KEY = re.compile(r"[a-zA-Z0-9-_]{1,128}")
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_MACHINE = re.compile(
    r"(?:https://www\.googleapis\.com/compute/v1/)?(?:projects/[^/]+/)?zones/([^/]+)/machineTypes/([^/]+)"
)
PROVISIONING_MODELS = ("SPOT", "STANDARD", "RESERVATION_BOUND", "FLEX_START")
TERMINATION_ACTIONS = ("DELETE", "STOP", "INSTANCE_TERMINATION_ACTION_UNSPECIFIED")
FLEX_MIN_RUN_S = 600.0  # 10 minutes to 7 days (research section 9, row 18)
FLEX_MAX_RUN_S = 7 * 24 * 3600.0
RESERVATION_TYPES = ("ANY_RESERVATION", "SPECIFIC_RESERVATION", "NO_RESERVATION", "UNSPECIFIED")


def name(value: object, field: str = "resource.name") -> str:
    if value is None or value == "":
        raise errors.required(field)
    if not isinstance(value, str) or NAME.fullmatch(value) is None:
        raise errors.invalid(field, value, _NAME_RULE)
    return value


def request_id(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.int == 0:
        raise errors.invalid("requestId", value, "The request ID must be a valid UUID.")
    return value


def instance_body(
    body: object, zone: str, catalog: Catalog, *, flex_min_run_seconds: float = FLEX_MIN_RUN_S
) -> tuple[dict[str, Any], MachineType]:
    if not isinstance(body, dict):
        raise errors.bad_request("Invalid JSON payload received. The body must be an object.")
    name(body.get("name"))
    machine = machine_type(body.get("machineType"), zone, catalog)
    properties(body, flex_min_run_seconds)
    boot_disk_type(body, machine)
    return dict(body), machine


# The disk types each TPU generation takes (issue 39): "TPU version | Supported disk types:
# v6e Hyperdisk Balanced, Hyperdisk ML; v5p Balanced Persistent Disk" (tpu/docs/
# setup-persistent-disk) and "The following disk types are supported on TPU7x: Hyperdisk
# Balanced, Hyperdisk ML" (tpu/docs/tpu7x). Hyperdisk ML is read-only, never a boot disk.
BOOT_DISK_TYPES = {
    "tpu7x": ("hyperdisk-balanced",),
    "ct6e": ("hyperdisk-balanced",),
    "ct5p": ("pd-balanced",),
}


def boot_disk_type(body: dict[str, Any], machine: MachineType) -> None:
    """The boot disk's type (a zonal URL on an instance, a bare name in a template) must be
    one its machine's TPU generation takes; absent is Compute Engine's default for it."""
    disks = body.get("disks") or []
    params = disks[0].get("initializeParams") or {}
    raw = params.get("diskType")
    allowed = BOOT_DISK_TYPES.get(machine.family)
    if raw is None or allowed is None:
        return
    bare = str(raw).rstrip("/").rsplit("/", 1)[-1]
    if bare not in allowed:
        raise errors.invalid(  # wording ours: Google's for this refusal is not known
            "resource.disks[0].initializeParams.diskType",
            raw,
            f"Disk type '{bare}' is not supported with machine type '{machine.name}': "
            f"use {' or '.join(allowed)}.",
        )


def properties(body: dict[str, Any], flex_min_run_seconds: float = FLEX_MIN_RUN_S) -> None:
    """Everything of an instance body but its name and machine type: also an instance
    template's `properties` (compute/shared.py)."""
    _disks(body.get("disks"))
    _network_interfaces(body.get("networkInterfaces"))
    _service_accounts(body.get("serviceAccounts"))
    _metadata(body.get("metadata"))
    _labels(body.get("labels"))
    _tags(body.get("tags"))
    _scheduling(body.get("scheduling"))
    _flex_start(body, flex_min_run_seconds)
    _reservation(body.get("reservationAffinity"))
    _reservation_bound(body)


def template_machine_type(value: object) -> MachineType:
    """An instance template's machine type: a bare name (`tpu7x-standard-4t`, as templates
    carry it) or a zonal path; offered in a zone or not is checked when a MIG uses it."""
    field = "resource.properties.machineType"
    if not value:
        raise errors.required(field)
    bare = value.rsplit("/", 1)[-1] if isinstance(value, str) else None
    if bare not in MACHINE_TYPES:
        raise errors.invalid(field, value, f"Machine type with name '{bare}' does not exist.")
    return MACHINE_TYPES[str(bare)]


def machine_type(value: object, zone: str, catalog: Catalog) -> MachineType:
    field = "resource.machineType"
    if not value:
        raise errors.required(field)
    match = _MACHINE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise errors.invalid(
            field, value, "Must be a URL to a valid Compute resource of the correct type."
        )
    if match[1] != zone:
        raise errors.invalid(field, value, f"Machine type must be in zone '{zone}'.")
    if match[2] not in MACHINE_TYPES or not catalog.offers_machine(zone, match[2]):
        raise errors.invalid(
            field, value, f"Machine type with name '{match[2]}' does not exist in zone '{zone}'."
        )
    return MACHINE_TYPES[match[2]]


def _list(value: object, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise errors.invalid(field, value, "Must be a list of objects.")
    return value


def _disks(value: object) -> None:
    disks = _list(value, "resource.disks")
    if not disks:
        raise errors.required("resource.disks")
    boots = [i for i, d in enumerate(disks) if d.get("boot")]
    if len(boots) != 1 or boots[0] != 0:
        raise errors.invalid(
            "resource.disks", "boot", "Exactly one boot disk, the first, is required."
        )
    for i, disk in enumerate(disks):
        params = disk.get("initializeParams") or {}
        if not disk.get("source") and not params.get("sourceImage") and disk.get("boot"):
            raise errors.required(f"resource.disks[{i}].initializeParams.sourceImage")
        size = params.get("diskSizeGb")
        if size is not None and (not str(size).isdigit() or int(size) < 10):
            raise errors.invalid(
                f"resource.disks[{i}].initializeParams.diskSizeGb",
                size,
                "Disk size must be at least 10 GB.",
            )


def _network_interfaces(value: object) -> None:
    nics = _list(value, "resource.networkInterfaces")
    for i, nic in enumerate(nics):
        for j, config in enumerate(
            _list(nic.get("accessConfigs"), f"resource.networkInterfaces[{i}].accessConfigs")
        ):
            if config.get("type", "ONE_TO_ONE_NAT") not in ("ONE_TO_ONE_NAT", "DIRECT_IPV6"):
                field = f"resource.networkInterfaces[{i}].accessConfigs[{j}].type"
                raise errors.invalid(field, config.get("type"))


def _service_accounts(value: object) -> None:
    accounts = _list(value, "resource.serviceAccounts")
    if len(accounts) > 1:
        raise errors.invalid(
            "resource.serviceAccounts",
            len(accounts),
            "Only one service account per VM instance is supported.",
        )
    for account in accounts:
        scopes = account.get("scopes", [])
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
            raise errors.invalid("resource.serviceAccounts[0].scopes", scopes)


def _metadata(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise errors.invalid("resource.metadata", value)
    seen: set[str] = set()
    for i, item in enumerate(_list(value.get("items"), "resource.metadata.items")):
        key = item.get("key")
        if not isinstance(key, str) or _METADATA_KEY.fullmatch(key) is None:
            raise errors.invalid(f"resource.metadata.items[{i}].key", key)
        if key in seen:
            raise errors.invalid("resource.metadata.items", key, "Duplicate metadata key.")
        seen.add(key)
        if not isinstance(item.get("value", ""), str) or len(item.get("value", "")) > 256 * 1024:
            raise errors.invalid(f"resource.metadata.items[{i}].value", "...")


def _labels(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or len(value) > 64:
        raise errors.invalid("resource.labels", value)
    for key, label in value.items():
        if _LABEL_KEY.fullmatch(key) is None:
            raise errors.invalid("labels", key, "Label keys must start with a lowercase letter.")
        if not isinstance(label, str) or _LABEL_VALUE.fullmatch(label) is None:
            raise errors.invalid(f"labels.{key}", label)


def _tags(value: object) -> None:
    if value is None:
        return
    items = value.get("items", []) if isinstance(value, dict) else None
    if not isinstance(items, list) or not all(
        isinstance(t, str) and NAME.fullmatch(t) for t in items
    ):
        raise errors.invalid("resource.tags.items", items)


def _scheduling(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise errors.invalid("resource.scheduling", value)
    checks = {
        "provisioningModel": PROVISIONING_MODELS,
        "instanceTerminationAction": TERMINATION_ACTIONS,
        "onHostMaintenance": ("MIGRATE", "TERMINATE"),
    }
    for key, allowed in checks.items():
        if key in value and value[key] not in allowed:
            raise errors.invalid(f"resource.scheduling.{key}", value[key])
    if value.get("onHostMaintenance") == "MIGRATE":
        # TPUs cannot be live-migrated (research section 1.3, weathernext guide).
        raise errors.invalid(
            "resource.scheduling.onHostMaintenance",
            "MIGRATE",
            "Instances with TPUs must terminate on host maintenance.",
        )
    spot = value.get("provisioningModel") == "SPOT" or value.get("preemptible")
    notice = value.get("preemptionNoticeDuration")
    if notice is not None and (
        not spot or not isinstance(notice, dict) or not str(notice.get("seconds", "0")).isdigit()
    ):
        raise errors.invalid(
            "resource.scheduling.preemptionNoticeDuration",
            notice,
            "A preemption notice duration is for Spot VMs only, as a Duration.",
        )
    if spot and value.get("automaticRestart"):
        raise errors.invalid(
            "resource.scheduling.automaticRestart",
            True,
            "Preemptible instances cannot be automatically restarted.",
        )


def duration_seconds(value: object) -> float | None:
    """A protobuf Duration `{seconds: "600", nanos: 0}` in seconds; None if it is not one."""
    if not isinstance(value, dict) or not str(value.get("seconds", "0")).isdigit():
        return None
    nanos = value.get("nanos", 0)
    if not isinstance(nanos, int) or not 0 <= nanos < 10**9:
        return None
    return int(value.get("seconds", 0)) + nanos / 1e9


def _flex_start(body: dict[str, Any], min_run_s: float) -> None:
    scheduling = body.get("scheduling") or {}
    params = body.get("params")
    valid_for = params.get("requestValidForDuration") if isinstance(params, dict) else None
    if valid_for is not None and (duration_seconds(valid_for) or 0) <= 0:
        raise errors.invalid("resource.params.requestValidForDuration", valid_for)
    if scheduling.get("provisioningModel") != "FLEX_START":
        return
    if scheduling.get("preemptible"):
        raise errors.invalid(
            "resource.scheduling.preemptible",
            True,
            "Flex-start instances cannot be preemptible or Spot.",
        )
    run = scheduling.get("maxRunDuration")
    if run is None:
        raise errors.required("resource.scheduling.maxRunDuration")
    seconds = duration_seconds(run)
    if seconds is None or not min_run_s <= seconds <= FLEX_MAX_RUN_S:
        raise errors.invalid(
            "resource.scheduling.maxRunDuration",
            run.get("seconds") if isinstance(run, dict) else run,
            f"Max run duration for Flex-start instances must be between {int(min_run_s)} "
            f"and {int(FLEX_MAX_RUN_S)} seconds.",
        )
    if scheduling.get("instanceTerminationAction") != "DELETE":
        raise errors.invalid(
            "resource.scheduling.instanceTerminationAction",
            scheduling.get("instanceTerminationAction"),
            "Flex-start instances require the DELETE termination action.",
        )


def _reservation(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise errors.invalid("resource.reservationAffinity", value)
    kind = value.get("consumeReservationType", "ANY_RESERVATION")
    if kind not in RESERVATION_TYPES:
        raise errors.invalid("resource.reservationAffinity.consumeReservationType", kind)
    if kind == "SPECIFIC_RESERVATION" and (
        value.get("key") != "compute.googleapis.com/reservation-name" or not value.get("values")
    ):
        raise errors.invalid(
            "resource.reservationAffinity",
            value,
            "A specific reservation needs key "
            "'compute.googleapis.com/reservation-name' and its name in values.",
        )


def _reservation_bound(body: dict[str, Any]) -> None:
    """A RESERVATION_BOUND VM consumes a calendar-mode reservation by name and is deleted at
    its end: every template Google shows for it has `instanceTerminationAction: DELETE` and
    a SPECIFIC_RESERVATION affinity (compute/docs/instance-groups/
    bulk-create-instances-in-mig; ai-hypercomputer/docs/create/create-mig-with-a4-or-a3ultra);
    [3P] TPU7x operators report DELETE "a required parameter for RESERVATION_BOUND + MIG".
    Wording ours."""
    scheduling = body.get("scheduling") or {}
    if scheduling.get("provisioningModel") != "RESERVATION_BOUND":
        return
    if scheduling.get("instanceTerminationAction") != "DELETE":
        raise errors.invalid(
            "resource.scheduling.instanceTerminationAction",
            scheduling.get("instanceTerminationAction"),
            "Reservation-bound instances require the DELETE termination action.",
        )
    affinity = body.get("reservationAffinity") or {}
    if affinity.get("consumeReservationType") != "SPECIFIC_RESERVATION":
        raise errors.invalid(
            "resource.reservationAffinity.consumeReservationType",
            affinity.get("consumeReservationType"),
            "Reservation-bound instances must consume a specific reservation.",
        )
