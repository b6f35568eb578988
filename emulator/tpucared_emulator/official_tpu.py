"""TPU API request bodies checked against the v2 discovery document and google-cloud-tpu's types.

The emulator refuses what Google refuses (issue 39): each body a v2 method takes (api.py's
routes: nodes.create and nodes.patch a Node, queuedResources.create a QueuedResource,
nodes.getGuestAttributes, nodes.start/stop, queuedResources.reset, generateServiceIdentity
their request messages) is checked, by `check(schema, body, path)`, before schema.py and the
state read it:

1. against the discovery document this package ships (tpu.v2.discovery.20250410.json, a copy
   of ../shared/reference's): every name must be a property of its schema (camelCase, or the
   proto's snake_case, which Google's JSON front end also takes), every value of the property's
   type (string, boolean, integer, int64 as a decimal string or a number, google-datetime and
   google-duration strings that parse, arrays, string maps, enums by name or by number);
2. then parsed with `google.cloud.tpu_v2`'s message, `from_json(..., ignore_unknown_fields=
   False)`, without the properties the document has and the proto lacks.
Where the two differ the discovery document is the REST API: `Node.upcomingMaintenance` is in
the document (20250410) and not in google-cloud-tpu 1.28's proto, so it is taken;
`GetGuestAttributesRequest.name` is in the proto but bound to the URL, not a body property, so it
is refused; an enum name the document lists is taken even if the proto lacks it.

Errors are schema.py's, word for word (its tests pin them): `Invalid JSON payload received.
Unknown name "foo" at 'node.scheduling_config': Cannot find field.` and `Invalid value at
'node.labels[k]' (TYPE_STRING), 5`, INVALID_ARGUMENT with a BadRequest field violation, as
Google's front end answers ([3P] github.com/zed-industries/zed/issues/62539 quotes a real
answer: `Invalid JSON payload received. Unknown name "x-mcp-header" at
'tools[0].function_declarations[63].parameters.properties[8].value': Cannot find field.`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from tpucared_emulator.clock import parse_duration, parse_rfc3339
from tpucared_emulator.errors import ApiError, invalid_argument

DISCOVERY = Path(__file__).with_name("tpu.v2.discovery.20250410.json")
MISSING = (
    "the emulator checks request bodies with Google's own types: install them with "
    "pip install google-cloud-compute google-cloud-tpu (tpucared-emulator's dependencies)"
)
_MODULE = "google.cloud.tpu_v2.types.cloud_tpu"
_INT = re.compile(r"-?\d+")
_TYPE_URL = "type.googleapis.com/"
_PACKAGE = "google.cloud.tpu.v2."
_FORMATS = {
    "int64": "TYPE_INT64", "uint64": "TYPE_UINT64", "int32": "TYPE_INT32",
    "uint32": "TYPE_UINT32", "google-datetime": _TYPE_URL + "google.protobuf.Timestamp",
    "google-duration": _TYPE_URL + "google.protobuf.Duration", "double": "TYPE_DOUBLE",
    "float": "TYPE_FLOAT",
}  # fmt: skip
# Messages the document names that are not the proto's own (google.type / google.rpc).
_FOREIGN = {"Interval": "google.type.Interval", "Status": "google.rpc.Status"}


def require() -> None:
    """Fails at once, with the fix, when google-cloud-tpu is not installed."""
    try:
        found = importlib.util.find_spec("google.cloud.tpu_v2") is not None
    except ModuleNotFoundError:  # no google.cloud at all
        found = False
    if not found:
        raise RuntimeError(MISSING)


@functools.cache
def schemas() -> dict[str, Any]:
    """The discovery document's schemas, by id."""
    document: dict[str, Any] = json.loads(DISCOVERY.read_text())
    return dict(document["schemas"])


@functools.cache
def types() -> Any:
    """google.cloud.tpu_v2's types module (by name: mypy need not read it)."""
    try:
        return importlib.import_module(_MODULE)
    except ImportError as exc:
        raise RuntimeError(MISSING) from exc


def check(schema: str, body: object, path: str) -> None:
    """Refuse `body` as Google would refuse it as a `schema` (a discovery schema id); `path`
    is where errors say it is ("node", "queued_resource", "" for a request message)."""
    proto = getattr(types(), schema, None)
    _message(schema, body, path, proto.pb().DESCRIPTOR if proto is not None else None)
    if proto is not None and isinstance(body, dict):
        try:
            proto.from_json(json.dumps(_proto_only(body, schema)), ignore_unknown_fields=False)
        except Exception as exc:  # json_format.ParseError: what the document let through
            raise invalid_argument(f"Invalid JSON payload received. {exc}", field=path) from None


def _proto_only(value: Any, schema: str) -> Any:
    """`value` without the properties the proto lacks (the document's newer fields), so the
    proto's parse judges the rest."""
    proto = getattr(types(), schema, None)
    names = {f.json_name for f in proto.pb().DESCRIPTOR.fields} if proto is not None else None
    properties = schemas()[schema].get("properties", {})
    out: dict[str, Any] = {}
    for raw_name, raw in value.items():
        name = _camel(str(raw_name))
        if names is not None and name not in names:
            continue
        ref = _ref(properties.get(name, {}))
        if ref is not None and ref in schemas() and ref not in _FOREIGN:
            if isinstance(raw, dict) and "$ref" in properties[name]:
                raw = _proto_only(raw, ref)
            elif isinstance(raw, list):
                raw = [_proto_only(i, ref) if isinstance(i, dict) else i for i in raw]
        out[name] = raw
    return out


def _ref(prop: dict[str, Any]) -> str | None:
    ref = prop.get("$ref") or prop.get("items", {}).get("$ref")
    return str(ref) if ref else None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", name).lower()


def _message(schema: str, value: object, path: str, proto: Any) -> None:
    if not isinstance(value, dict):
        full = proto.full_name if proto is not None else _FOREIGN.get(schema, _PACKAGE + schema)
        raise _invalid_value(path, _TYPE_URL + full, value)
    properties = schemas()[schema].get("properties", {})
    fields = {f.json_name: f for f in proto.fields} if proto is not None else {}
    oneofs: set[str] = set()
    for raw_name, raw in value.items():
        name = _camel(str(raw_name))
        prop = properties.get(name)
        if prop is None:
            raise invalid_argument(
                f"Invalid JSON payload received. Unknown name \"{raw_name}\" at '{path}': "
                "Cannot find field.",
                field=path,
            )
        if raw is None:
            continue  # JSON null is "not set", for every proto3 field
        _oneof(fields.get(name), oneofs, str(raw_name), path)
        where = f"{path}.{_snake(name)}" if path else _snake(name)
        _value(prop, raw, where, fields.get(name))


def _oneof(field: Any, seen: set[str], raw_name: str, path: str) -> None:
    """At most one member of a proto oneof (a proto3 `optional` is a oneof of its own: not
    one of these), in the protobuf JSON parser's wording."""
    oneof = field.containing_oneof if field is not None else None
    if oneof is None or len(oneof.fields) < 2:
        return
    if oneof.name in seen:
        raise invalid_argument(
            f"Invalid value at '{path}' (oneof), oneof field '{oneof.name}' is already set. "
            f"Cannot set '{raw_name}'",
            field=path,
        )
    seen.add(oneof.name)


def _value(prop: dict[str, Any], value: object, path: str, field: Any) -> None:
    if prop.get("type") == "array":
        if not isinstance(value, list):
            raise _invalid_value(path, "list", value)
        for index, item in enumerate(value):
            _value(prop["items"], item, f"{path}[{index}]", field)
        return
    if "$ref" in prop:
        message = field.message_type if field is not None else None
        _message(prop["$ref"], value, path, message)
        return
    kind = prop.get("type")
    if kind == "object":  # a map: additionalProperties holds the values' schema
        if not isinstance(value, dict):
            raise _invalid_value(path, "map", value)
        inner = prop.get("additionalProperties", {})
        for key, item in value.items():
            _value(inner, item, f"{path}[{key}]", None)
        return
    if "enum" in prop:
        _enum(prop, value, path, field)
        return
    _scalar(kind, prop.get("format"), value, path)


def _enum(prop: dict[str, Any], value: object, path: str, field: Any) -> None:
    enum = field.enum_type if field is not None and field.enum_type is not None else None
    if isinstance(value, str) and value in prop["enum"]:
        return
    number = isinstance(value, int) and not isinstance(value, bool)
    if number and enum is not None and any(v.number == value for v in enum.values):
        return
    name = enum.full_name if enum is not None else "enum"
    raise _invalid_value(path, _TYPE_URL + name, value)


def _scalar(kind: str | None, fmt: str | None, value: object, path: str) -> None:
    ok = True
    if kind == "boolean":
        ok, type_name = isinstance(value, bool), "TYPE_BOOL"
    elif kind == "integer" or fmt in ("int64", "uint64"):
        type_name = _FORMATS.get(fmt or "", "TYPE_INT32")
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and _INT.fullmatch(value) is not None
        )
    elif kind == "number":
        type_name = _FORMATS.get(fmt or "", "TYPE_DOUBLE")
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == "any":
        return
    else:
        type_name = _FORMATS.get(fmt or "", "TYPE_STRING")
        ok = isinstance(value, str)
        if ok and fmt in ("google-datetime", "google-duration"):
            try:
                (parse_rfc3339 if fmt == "google-datetime" else parse_duration)(str(value))
            except ValueError:
                ok = False
    if not ok:
        raise _invalid_value(path, type_name, value)


def _invalid_value(path: str, type_name: str, value: object) -> ApiError:
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    return invalid_argument(f"Invalid value at '{path}' ({type_name}), {shown}", field=path)
