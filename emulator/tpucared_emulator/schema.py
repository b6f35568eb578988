"""Request-body validation: JSON in, normalized camelCase dicts out, Google-style 400s on error.

The subset of the v2 message schemas (cloud_tpu.proto) that clients send. Like Google's JSON
front end it accepts field names in camelCase or snake_case, enums by name or by number (the
official client sends numbers), int64 as string or number; it rejects unknown fields and wrong
types with `Invalid JSON payload received...` / `Invalid value at '...'` 400s, refuses two
members of one oneof (`... (oneof), oneof field 'x' is already set. Cannot set 'y'`, as the
protobuf JSON writer words it), and drops output-only fields. The result uses camelCase
names and enum names, ready to echo back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tpucared_emulator.clock import parse_duration, parse_rfc3339
from tpucared_emulator.errors import ApiError, invalid_argument

TPU = "google.cloud.tpu.v2."
TYPE_URL = "type.googleapis.com/"


@dataclass(frozen=True)
class EnumType:
    full_name: str
    values: dict[str, int]

    def name_of(self, value: object) -> str | None:
        if isinstance(value, str) and value in self.values:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            for name, number in self.values.items():
                if number == value:
                    return name
        return None

    def number_of(self, name: str) -> int:
        return self.values[name]


def _enum(full_name: str, *pairs: tuple[str, int]) -> EnumType:
    return EnumType(TPU + full_name, dict(pairs))


NODE_STATE = _enum(
    "Node.State",
    *[
        (n, i)
        for n, i in (
            ("STATE_UNSPECIFIED", 0), ("CREATING", 1), ("READY", 2), ("RESTARTING", 3),
            ("REIMAGING", 4), ("DELETING", 5), ("REPAIRING", 6), ("STOPPED", 8),
            ("STOPPING", 9), ("STARTING", 10), ("PREEMPTED", 11), ("TERMINATED", 12),
            ("HIDING", 13), ("HIDDEN", 14), ("UNHIDING", 15), ("UNKNOWN", 16),
        )
    ],
)  # fmt: skip
NODE_HEALTH = _enum(
    "Node.Health",
    ("HEALTH_UNSPECIFIED", 0), ("HEALTHY", 1), ("TIMEOUT", 3), ("UNHEALTHY_TENSORFLOW", 4),
    ("UNHEALTHY_MAINTENANCE", 5),
)  # fmt: skip
API_VERSION = _enum(
    "Node.ApiVersion",
    ("API_VERSION_UNSPECIFIED", 0), ("V1_ALPHA1", 1), ("V1", 2), ("V2_ALPHA1", 3), ("V2", 4),
)  # fmt: skip
DISK_MODE = _enum("AttachedDisk.DiskMode", ("DISK_MODE_UNSPECIFIED", 0), ("READ_WRITE", 1),
                  ("READ_ONLY", 2))  # fmt: skip
ACCELERATOR_CONFIG_TYPE = _enum(
    "AcceleratorConfig.Type",
    ("TYPE_UNSPECIFIED", 0), ("V2", 2), ("V3", 4), ("V4", 7), ("V5LITE_POD", 9), ("V5P", 10),
    ("V6E", 11),
)  # fmt: skip


@dataclass(frozen=True)
class Scalar:
    type: str  # string | bool | int32 | int64 | timestamp | duration | any


@dataclass(frozen=True)
class EnumOf:
    enum: EnumType


@dataclass(frozen=True)
class MessageOf:
    name: str


@dataclass(frozen=True)
class ListOf:
    item: Scalar | EnumOf | MessageOf


@dataclass(frozen=True)
class MapOf:
    value: Scalar


Kind = Scalar | EnumOf | MessageOf | ListOf | MapOf


@dataclass(frozen=True)
class Field:
    kind: Kind
    output_only: bool = False
    oneof: str | None = None  # the proto oneof it belongs to (at most one member may be set)


STRING, BOOL, INT32 = Scalar("string"), Scalar("bool"), Scalar("int32")
INT64, TIMESTAMP, DURATION, ANY = (
    Scalar("int64"), Scalar("timestamp"), Scalar("duration"), Scalar("any"),
)  # fmt: skip
OUT_STRING = Field(STRING, output_only=True)

MESSAGES: dict[str, dict[str, Field]] = {
    "Node": {
        "name": OUT_STRING,
        "description": Field(STRING),
        "acceleratorType": Field(STRING),
        "state": Field(EnumOf(NODE_STATE), output_only=True),
        "healthDescription": OUT_STRING,
        "runtimeVersion": Field(STRING),
        "networkConfig": Field(MessageOf("NetworkConfig")),
        "networkConfigs": Field(ListOf(MessageOf("NetworkConfig"))),
        "cidrBlock": Field(STRING),
        "serviceAccount": Field(MessageOf("ServiceAccount")),
        "createTime": Field(TIMESTAMP, output_only=True),
        "schedulingConfig": Field(MessageOf("SchedulingConfig")),
        "networkEndpoints": Field(ListOf(Scalar("any")), output_only=True),
        "health": Field(EnumOf(NODE_HEALTH)),
        "labels": Field(MapOf(STRING)),
        "metadata": Field(MapOf(STRING)),
        "tags": Field(ListOf(STRING)),
        "id": Field(INT64, output_only=True),
        "dataDisks": Field(ListOf(MessageOf("AttachedDisk"))),
        "apiVersion": Field(EnumOf(API_VERSION), output_only=True),
        "symptoms": Field(ListOf(ANY), output_only=True),
        "shieldedInstanceConfig": Field(MessageOf("ShieldedInstanceConfig")),
        "acceleratorConfig": Field(MessageOf("AcceleratorConfig")),
        "queuedResource": OUT_STRING,
        "multisliceNode": Field(BOOL, output_only=True),
        "upcomingMaintenance": Field(ANY, output_only=True),
    },
    "NetworkConfig": {
        "network": Field(STRING),
        "subnetwork": Field(STRING),
        "enableExternalIps": Field(BOOL),
        "canIpForward": Field(BOOL),
        "queueCount": Field(INT32),
    },
    "ServiceAccount": {"email": Field(STRING), "scope": Field(ListOf(STRING))},
    "SchedulingConfig": {
        "preemptible": Field(BOOL),
        "reserved": Field(BOOL),
        "spot": Field(BOOL),
    },
    "AttachedDisk": {"sourceDisk": Field(STRING), "mode": Field(EnumOf(DISK_MODE))},
    "ShieldedInstanceConfig": {"enableSecureBoot": Field(BOOL)},
    "AcceleratorConfig": {
        "type": Field(EnumOf(ACCELERATOR_CONFIG_TYPE)),
        "topology": Field(STRING),
    },
    "QueuedResource": {
        "name": OUT_STRING,
        "createTime": Field(TIMESTAMP, output_only=True),
        "tpu": Field(MessageOf("QueuedResource.Tpu")),
        "spot": Field(MessageOf("QueuedResource.Spot")),
        "guaranteed": Field(MessageOf("QueuedResource.Guaranteed")),
        "queueingPolicy": Field(MessageOf("QueuedResource.QueueingPolicy")),
        "state": Field(ANY, output_only=True),
        "reservationName": Field(STRING),
    },
    "QueuedResource.Tpu": {"nodeSpec": Field(ListOf(MessageOf("QueuedResource.Tpu.NodeSpec")))},
    "QueuedResource.Tpu.NodeSpec": {
        "parent": Field(STRING),
        # oneof name_strategy: one node by id, or several by multisliceParams.
        "nodeId": Field(STRING, oneof="name_strategy"),
        "multisliceParams": Field(
            MessageOf("QueuedResource.Tpu.NodeSpec.MultisliceParams"), oneof="name_strategy"
        ),
        "node": Field(MessageOf("Node")),
    },
    "QueuedResource.Tpu.NodeSpec.MultisliceParams": {
        "nodeCount": Field(INT32),
        "nodeIdPrefix": Field(STRING),
    },
    "QueuedResource.Spot": {},
    "QueuedResource.Guaranteed": {"minDuration": Field(DURATION)},
    "QueuedResource.QueueingPolicy": {
        "validUntilDuration": Field(DURATION),
        "validUntilTime": Field(TIMESTAMP),
        "validAfterDuration": Field(DURATION),
        "validAfterTime": Field(TIMESTAMP),
        "validInterval": Field(MessageOf("Interval")),
    },
    "Interval": {"startTime": Field(TIMESTAMP), "endTime": Field(TIMESTAMP)},
    "GetGuestAttributesRequest": {
        "name": Field(STRING),
        "queryPath": Field(STRING),
        "workerIds": Field(ListOf(STRING)),
    },
}

_SCALAR_TYPE_NAMES = {
    "string": "TYPE_STRING",
    "bool": "TYPE_BOOL",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "timestamp": "type.googleapis.com/google.protobuf.Timestamp",
    "duration": "type.googleapis.com/google.protobuf.Duration",
}


def snake(name: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", name).lower()


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _unknown_field(name: str, path: str) -> ApiError:
    return invalid_argument(
        f"Invalid JSON payload received. Unknown name \"{name}\" at '{path}': Cannot find field.",
        field=path,
    )


def _invalid_value(path: str, type_name: str, value: object) -> ApiError:
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    return invalid_argument(f"Invalid value at '{path}' ({type_name}), {shown}", field=path)


def _scalar(kind: Scalar, value: object, path: str) -> Any:
    type_name = _SCALAR_TYPE_NAMES.get(kind.type, kind.type)
    ok = True
    if kind.type == "any":
        return value
    if kind.type == "string":
        ok = isinstance(value, str)
    elif kind.type == "bool":
        ok = isinstance(value, bool)
    elif kind.type in ("int32", "int64"):
        # proto3 JSON allows integers as numbers or as decimal strings.
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and kind.type == "int32":
            ok = -(2**31) <= int(str(value)) < 2**31
        if ok and kind.type == "int64":
            return str(value)  # int64 travels as a string in responses
    elif kind.type in ("timestamp", "duration"):
        ok = isinstance(value, str)
        if ok:
            try:
                (parse_rfc3339 if kind.type == "timestamp" else parse_duration)(str(value))
            except ValueError:
                ok = False
    if not ok:
        raise _invalid_value(path, type_name, value)
    return value


def _value(kind: Kind, value: object, path: str) -> Any:
    if isinstance(kind, Scalar):
        return _scalar(kind, value, path)
    if isinstance(kind, EnumOf):
        name = kind.enum.name_of(value)
        if name is None:
            raise _invalid_value(path, TYPE_URL + kind.enum.full_name, value)
        return name
    if isinstance(kind, MessageOf):
        return normalize(value, kind.name, path)
    if isinstance(kind, ListOf):
        if not isinstance(value, list):
            raise _invalid_value(path, "list", value)
        return [_value(kind.item, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if not isinstance(value, dict):
        raise _invalid_value(path, "map", value)
    return {str(k): _scalar(kind.value, v, f"{path}[{k}]") for k, v in value.items()}


def normalize(value: object, message: str, path: str) -> dict[str, Any]:
    """Validate `value` as message `message`; `path` is the snake_case location for errors
    (e.g. "node"). Returns camelCase keys, enum names, output-only fields removed."""
    fields = MESSAGES[message]
    if not isinstance(value, dict):
        raise _invalid_value(path, TYPE_URL + TPU + message, value)
    out: dict[str, Any] = {}
    oneofs: set[str] = set()
    for raw_name, raw in value.items():
        name = camel(str(raw_name))
        spec = fields.get(name)
        if spec is None:
            raise _unknown_field(str(raw_name), path)
        if raw is None:
            continue  # JSON null means "not set" for every proto3 field
        if spec.oneof is not None:
            if spec.oneof in oneofs:
                raise invalid_argument(
                    f"Invalid value at '{path}' (oneof), oneof field '{spec.oneof}' is already "
                    f"set. Cannot set '{raw_name}'",
                    field=path,
                )
            oneofs.add(spec.oneof)
        normalized = _value(spec.kind, raw, f"{path}.{snake(name)}")
        if not spec.output_only:
            out[name] = normalized
    return out
