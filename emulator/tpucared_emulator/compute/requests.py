"""The compute v1 calls on the emulated cloud: what each request does to compute/book.py's book.

`ComputeRequests` validates (compute/validation.py), raises compute-style errors
(compute/errors.py) and changes the book only through its transitions. Reads render the
compute v1 shapes: instance and operation lists with `filter` (compute/filters.py),
`maxResults` (0-500, default 500) and `pageToken` (paging.py's tokens, naming the last item,
never an offset); getGuestAttributes from the worker host's keys; machine types from the
catalog (catalog.py's MACHINE_TYPES). An insert beyond the region's chip quota
(`PUT /_emulator/v1/quota`) fails with QUOTA_EXCEEDED, synchronously (HTTP 403 `quotaExceeded`)
or in its operation, per `EmulatorOptions.compute_quota_mode`.
"""

from __future__ import annotations

import zlib
from typing import Any

from tpucared_emulator.catalog import MACHINE_TYPES
from tpucared_emulator.compute import errors, filters, validation
from tpucared_emulator.compute.book import CREATING, ComputeBook
from tpucared_emulator.compute.resources import API, ZoneOperation, zone_url
from tpucared_emulator.paging import decode_token, encode_token

MAX_RESULTS = 500  # the documented maximum and default of maxResults (research section 5.1)


def max_results(raw: str | None) -> int:
    if raw is None or raw == "":
        return MAX_RESULTS
    if not raw.isdigit() or int(raw) > MAX_RESULTS:
        raise errors.invalid("maxResults", raw, f"Must be between 0 and {MAX_RESULTS}.")
    return int(raw) or MAX_RESULTS


class ComputeRequests:
    def __init__(self, book: ComputeBook) -> None:
        self.book = book
        self.state = book.state
        self.options = book.options

    # -----------------------------------------------------------------------------------------
    # Instances.

    def insert(self, project: str, zone: str, body: object, raw_id: str | None) -> ZoneOperation:
        book = self.book
        book.check_zone(project, zone)
        request_id = validation.request_id(raw_id)
        replay = book.replayed(project, zone, request_id)
        if replay is not None and replay.operation_type == "insert":
            return replay
        spec, machine = validation.instance_body(
            body, zone, book.catalog, flex_min_run_seconds=self.options.compute_flex_min_run_seconds
        )
        flex = (spec.get("scheduling") or {}).get("provisioningModel") == "FLEX_START"
        if flex and self.options.compute_tpu_flex_instances == "refuse":
            raise errors.invalid(
                "resource.scheduling.provisioningModel",
                "FLEX_START",
                "Flex-start TPU VMs are created through managed instance groups.",
            )
        key = f"projects/{project}/zones/{zone}/instances/{spec['name']}"
        if key in book.instances:
            raise errors.already_exists(key)
        over_quota = book.quota_error(zone, machine)
        if over_quota is not None and self.options.compute_quota_mode == "sync_http":
            raise errors.quota_http(over_quota)
        if (
            over_quota is None
            and (spec.get("scheduling") or {}).get("provisioningModel") == "FLEX_START"
        ):
            # A flex-start VM never meets a stockout: it waits PENDING for capacity (flex.py).
            return book.create_instance(project, zone, spec, machine, request_id=request_id)
        mode = self.options.compute_stockout_mode
        judged_now = self.options.capacity_judged != "end"
        if over_quota is None and judged_now and not self.state.has_capacity(zone, machine.name, 1):
            if mode == "sync_http":
                raise errors.stockout_http(book.stockout(project, zone, machine))
            if mode == "born_done":
                return self._born_done(project, zone, spec, machine, request_id)
        return book.create_instance(project, zone, spec, machine, request_id=request_id)

    def _born_done(
        self, project: str, zone: str, spec: dict[str, Any], machine: Any, request_id: str | None
    ) -> ZoneOperation:
        """An insert whose operation is DONE with the stockout when it is returned (§9 row 1)."""
        book = self.book
        inst = book.spawn(project, zone, spec, machine)
        op = book.new_operation(project, zone, "insert", inst, request_id=request_id)
        book.remove(inst)
        op.finish(book.now(), book.stockout(project, zone, machine))
        return op

    def delete(self, project: str, zone: str, name: str, raw_id: str | None) -> ZoneOperation:
        book = self.book
        request_id = validation.request_id(raw_id)
        replay = book.replayed(project, zone, request_id)
        if replay is not None and replay.operation_type == "delete":
            return replay
        return book.delete_instance(book.instance(project, zone, name), request_id)

    def get(self, project: str, zone: str, name: str) -> dict[str, Any]:
        return self.book.instance(project, zone, name).to_json()

    def list_instances(self, project: str, zone: str, query: dict[str, str]) -> dict[str, Any]:
        book = self.book
        book.check_zone(project, zone)
        parent = f"projects/{project}/zones/{zone}"
        match = filters.parse(query.get("filter"))
        size = max_results(query.get("maxResults"))
        scope = parent + "/instances"
        index = book.index.get(parent)
        last = decode_token(query.get("pageToken"), scope)
        items: list[dict[str, Any]] = []
        more = False
        while index is not None and len(items) < size:
            names, more = index.after(last, size)
            for position, name in enumerate(names):
                rendered = book.instances[f"{parent}/instances/{name}"].to_json()
                last = name
                if match(rendered):
                    items.append(rendered)
                    if len(items) == size:
                        more = more or position < len(names) - 1
                        break
            if not more:
                break
        token = encode_token(scope, last) if more and last is not None else None
        return self._list_page(
            "compute#instanceList", f"{zone_url(project, zone)}/instances", scope, items, token
        )

    def _list_page(
        self, kind: str, link: str, scope: str, items: list[dict[str, Any]], token: str | None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": kind, "id": scope}
        if items or self.options.compute_empty_items_listed:
            out["items"] = items
        if token:
            out["nextPageToken"] = token
        out["selfLink"] = link
        return out

    def guest_attributes(
        self, project: str, zone: str, name: str, query_path: str | None, variable_key: str | None
    ) -> dict[str, Any]:
        inst = self.book.instance(project, zone, name)
        flag = inst.metadata.get("enable-guest-attributes", "").upper() == "TRUE"
        link = f"{inst.self_link}/guestAttributes"
        if (
            self.options.compute_guest_attributes_need_flag and not flag
        ) or inst.status in CREATING:
            # Not published (yet): what a client reads as "retry later" (research section 5.2).
            raise errors.not_found(f"{inst.key}/guestAttributes/{query_path or variable_key or ''}")
        published = {f"hostkeys/{t}": blob for t, blob in inst.worker.host_keys().items()}
        out: dict[str, Any] = {"kind": "compute#guestAttributes", "selfLink": link}
        if variable_key:
            if variable_key not in published:
                raise errors.not_found(f"{inst.key}/guestAttributes/{variable_key}")
            return {**out, "variableKey": variable_key, "variableValue": published[variable_key]}
        prefix = query_path or ""
        items = [
            {"namespace": key.split("/")[0], "key": key.split("/", 1)[1], "value": value}
            for key, value in published.items()
            if key.startswith(prefix) or key == prefix.rstrip("/")
        ]
        return {**out, "queryPath": prefix, "queryValue": {"items": items}}

    # -----------------------------------------------------------------------------------------
    # Operations and machine types.

    def get_operation(self, project: str, zone: str, name: str) -> dict[str, Any]:
        return self.book.operation(project, zone, name).to_json()

    def list_operations(self, project: str, zone: str, query: dict[str, str]) -> dict[str, Any]:
        book = self.book
        book.check_zone(project, zone)
        parent = f"projects/{project}/zones/{zone}/operations/"
        match = filters.parse(query.get("filter"))
        size = max_results(query.get("maxResults"))
        scope = parent.rstrip("/")
        last = decode_token(query.get("pageToken"), scope)
        names = sorted(k.removeprefix(parent) for k in book.ops if k.startswith(parent))
        items: list[dict[str, Any]] = []
        token = None
        for name in names:
            if last is not None and name <= last:
                continue
            rendered = book.ops[parent + name].to_json()
            if match(rendered):
                if len(items) == size:
                    token = encode_token(scope, items[-1]["name"])
                    break
                items.append(rendered)
        link = f"{zone_url(project, zone)}/operations"
        return self._list_page("compute#operationList", link, scope, items, token)

    def machine_type(self, project: str, zone: str, name: str) -> dict[str, Any]:
        self.book.check_zone(project, zone)
        resource = f"projects/{project}/zones/{zone}/machineTypes/{name}"
        machine = MACHINE_TYPES.get(name)
        if machine is None or not self.book.catalog.offers_machine(zone, name):
            raise errors.not_found(resource)
        return {
            "kind": "compute#machineType",
            "id": str(zlib.crc32(name.encode())),
            "creationTimestamp": "2025-01-01T00:00:00.000-08:00",
            "name": name,
            "description": f"{machine.guest_cpus} vCPUs, {machine.memory_mb // 1024} GB RAM, "
            f"{machine.chips} TPU chips",
            "guestCpus": machine.guest_cpus,
            "memoryMb": machine.memory_mb,
            "maximumPersistentDisks": 128,
            "maximumPersistentDisksSizeGb": "263168",
            "zone": zone,
            "selfLink": f"{API}/{resource}",
            "isSharedCpu": False,
            "accelerators": [
                {
                    "guestAcceleratorType": machine.accelerator,
                    "guestAcceleratorCount": machine.chips,
                }
            ],
            "architecture": "X86_64",
        }
