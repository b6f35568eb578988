"""Semantic checks of create/patch requests beyond JSON shape (schema.py does the shape).

Resource ids (a multislice request's node ids too), labels, the accelerator (type or config)
against the zone's catalog, queueing policies, update masks. Each failure is the ApiError GCP
returns, with its wording where known.
"""

from __future__ import annotations

import re
from typing import Any

from tpucared_emulator import errors
from tpucared_emulator.catalog import Catalog
from tpucared_emulator.clock import parse_duration, parse_rfc3339
from tpucared_emulator.errors import invalid_argument
from tpucared_emulator.schema import camel, snake
from tpucared_emulator.topology import (
    AcceleratorShape,
    from_accelerator_config,
    parse_accelerator_type,
)

_RFC1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QR_ID = re.compile(r"[A-Za-z0-9_.~+%-]+")
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
MAX_LABELS = 64
# The emulator's own bound on a multislice request (the API documents none beyond quota): a
# nodeCount of 2^31 must not make the emulator build two billion node ids.
MAX_MULTISLICE_NODES = 1024

# nodes.patch: the fields the v2 API lets you change (discovery doc, updateMask).
UPDATABLE_FIELDS = ("description", "tags", "labels", "metadata", "networkConfig.enableExternalIps")


def node_id(value: str | None, param: str = "nodeId") -> str:
    if not value:
        raise invalid_argument(f"Required parameter '{param}' is missing.", field=snake(param))
    if len(value) > 63 or not _RFC1035.fullmatch(value):
        raise invalid_argument(
            f"Invalid value for field '{param}': '{value}'. Must be a match of regex "
            "'[a-z]([-a-z0-9]*[a-z0-9])?' and at most 63 characters long.",
            field=snake(param),
        )
    return value


def queued_resource_id(value: str | None) -> str:
    if not value:
        raise invalid_argument(
            "Required parameter 'queuedResourceId' is missing.", field="queued_resource_id"
        )
    if not _QR_ID.fullmatch(value):
        raise invalid_argument(
            f"Invalid value for field 'queuedResourceId': '{value}'. Must be a match of regex "
            "'^[A-Za-z0-9_.~+%-]+$'.",
            field="queued_resource_id",
        )
    return value


def multislice_node_ids(params: dict[str, Any], qr_id: str, where: str) -> list[str]:
    """The node ids a nodeSpec's MultisliceParams asks for: `{prefix}-0` .. `{prefix}-{N-1}`,
    the prefix being `nodeIdPrefix` or else the queued resource's id. `where`: "node_spec[i]"."""
    count = int(params.get("nodeCount", 0))
    if count < 2:
        raise errors.bad_request(f"{where}.multislice_params.node_count must be > 1, got {count}")
    if count > MAX_MULTISLICE_NODES:
        raise errors.bad_request(
            f"{where}.multislice_params.node_count must be at most {MAX_MULTISLICE_NODES}, "
            f"got {count}"
        )
    prefix = params.get("nodeIdPrefix") or qr_id
    if not _QR_ID.fullmatch(prefix):
        raise invalid_argument(
            f"Invalid value for field 'nodeSpec.multisliceParams.nodeIdPrefix': '{prefix}'. "
            "Must be a match of regex '^[A-Za-z0-9_.~+%-]+$'.",
            field="node_spec.multislice_params.node_id_prefix",
        )
    ids = [f"{prefix}-{n}" for n in range(count)]
    if not all(len(i) <= 63 and _RFC1035.fullmatch(i) for i in ids):
        source = "nodeIdPrefix" if params.get("nodeIdPrefix") else "queuedResourceId"
        raise invalid_argument(
            f"Invalid value for field 'nodeSpec.multisliceParams.nodeIdPrefix': '{prefix}' "
            f"(from {source}). Node ids '{ids[0]}' .. '{ids[-1]}' must be a match of regex "
            "'[a-z]([-a-z0-9]*[a-z0-9])?' and at most 63 characters long.",
            field="node_spec.multislice_params.node_id_prefix",
        )
    return ids


def labels(value: dict[str, str], path: str = "node.labels") -> None:
    if len(value) > MAX_LABELS:
        raise invalid_argument(f"Invalid value at '{path}': at most {MAX_LABELS} labels.", path)
    for key, val in value.items():
        if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(val):
            raise invalid_argument(
                f"Invalid value at '{path}': label '{key}={val}'. Keys must start with a "
                "lowercase letter and contain only lowercase letters, digits, '_' and '-' "
                "(at most 63 characters); values may be empty or contain only lowercase "
                "letters, digits, '_' and '-' (at most 63 characters).",
                field=path,
            )


def accelerator(spec: dict[str, Any], zone: str, catalog: Catalog) -> AcceleratorShape:
    """The slice a node spec asks for, by acceleratorType or acceleratorConfig."""
    name = spec.get("acceleratorType")
    config = spec.get("acceleratorConfig")
    if name and config:
        raise errors.bad_request(
            "only one of accelerator_type and accelerator_config may be specified"
        )
    if config:
        try:
            shape = from_accelerator_config(config.get("type", ""), config.get("topology", ""))
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from None
    elif name:
        try:
            shape = parse_accelerator_type(name)
        except ValueError:
            raise errors.unknown_accelerator(name, zone) from None
    else:
        raise invalid_argument(
            "Field 'accelerator_type' or 'accelerator_config' is required.",
            field="node.accelerator_type",
        )
    if not catalog.offers(zone, shape.name):
        raise errors.unknown_accelerator(shape.name, zone)
    return shape


def runtime_version(spec: dict[str, Any]) -> None:
    if not spec.get("runtimeVersion"):
        raise invalid_argument("Field 'runtime_version' is required.", field="node.runtime_version")


def queueing_window(policy: dict[str, Any], now: float) -> tuple[float, float | None]:
    """(valid after, valid until) instants of a QueueingPolicy."""
    after, until = now, None
    if "validAfterDuration" in policy:
        after = now + parse_duration(policy["validAfterDuration"])
    if "validAfterTime" in policy:
        after = parse_rfc3339(policy["validAfterTime"])
    if "validUntilDuration" in policy:
        until = now + parse_duration(policy["validUntilDuration"])
    if "validUntilTime" in policy:
        until = parse_rfc3339(policy["validUntilTime"])
    interval = policy.get("validInterval")
    if interval:
        if "startTime" in interval:
            after = parse_rfc3339(interval["startTime"])
        if "endTime" in interval:
            until = parse_rfc3339(interval["endTime"])
    return after, until


def update_mask(raw: str | None) -> list[str]:
    """updateMask paths in camelCase (clients send either spelling)."""
    if not raw:
        raise invalid_argument("Required parameter 'updateMask' is missing.", "update_mask")
    paths = [".".join(camel(p) for p in path.strip().split(".")) for path in raw.split(",")]
    for path in paths:
        if path not in UPDATABLE_FIELDS:
            raise errors.bad_request(
                f"field {snake(path)} cannot be updated; supported fields are "
                "[description, tags, labels, metadata, network_config.enable_external_ips]"
            )
    return paths
