"""Request bodies checked against Google's own Compute Engine types before anything reads them.

The emulator refuses what Google refuses (issue 39): every body the compute surface accepts
(api.py's routes: instances.insert, instanceTemplates.insert, instanceGroupManagers.insert,
resourcePolicies.insert) is walked against the message of `google.cloud.compute_v1` (the
official client's types, generated from Compute Engine's discovery document) and then parsed
with `Message.from_json(body, ignore_unknown_fields=False)`. `check(kind, body)` is the one call
each route makes; api.py calls it before compute/requests.py, mig_requests.py or shared.py look
at the body, so their own checks (compute/validation.py) only ever see well-formed bodies.

What is refused, each a 400 in compute's envelope (compute/errors.py):
- a name the message does not have (camelCase JSON names, or the proto's snake_case ones, which
  Google's JSON front end also takes): `Invalid JSON payload received. Unknown name "foo" at
  'resource.scheduling': Cannot find field.` The wording is the front end's JSON-to-proto
  error, as Google's APIs answer it ([3P] github.com/zed-industries/zed/issues/62539 and
  smallmain/vscode-unify-chat-provider/issues/290 quote real answers: `Invalid JSON payload
  received. Unknown name "x-mcp-header" at 'request.tools[0]...': Cannot find field.`). The
  path's root is `resource`, the body's name in Compute Engine's own errors ("Required field
  'resource' not specified", googleapis/google-api-python-client#608; "Invalid value for field
  'resource.perInstanceProperties.key'", googleapis/nodejs-compute#765), and its steps are the
  JSON names, as those errors spell them. No compute answer to an unknown name was found: the
  path's spelling is ours.
- a value of the wrong JSON type: `Invalid value at 'resource.canIpForward' (TYPE_BOOL), "yes"`,
  the front end's wording (the same [3P] answers: `Invalid value at '...' (TYPE_STRING), true`).
  int64 and uint64 travel as decimal strings (numbers are taken too, as proto3 JSON allows).
- an enum value the type does not list. Compute Engine's enums are strings in the proto
  (`optional string provisioning_model`, "Check the ProvisioningModel enum for the list of
  possible values"), so `from_json` takes any string: the walk checks each string field that has
  a nested enum of its name (Scheduling.provisioningModel -> Scheduling.ProvisioningModel)
  against that enum's names, without its `UNDEFINED_*` placeholder, and answers as Compute
  Engine answers a bad value: `Invalid value for field 'resource.scheduling.provisioningModel':
  'X'.` (errors.invalid, the wording the emulator already uses for compute's bad values).
Output-only fields (`id`, `kind`, `status`, ...) are accepted, as Google ignores them on input.

`google-cloud-compute` is imported on first use (its types take a second and a half to load),
and `require()` says at the emulator's start, in one line, that the extra is missing.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
from typing import Any

from tpucared_emulator.compute import errors

# The messages of the bodies the compute surface accepts, by the name api.py passes.
KINDS = ("Instance", "InstanceTemplate", "InstanceGroupManager", "ResourcePolicy")
MISSING = (
    "the emulator checks request bodies with Google's own types: install them with "
    "pip install google-cloud-compute google-cloud-tpu (tpucared-emulator's dependencies)"
)
_MODULE = "google.cloud.compute_v1.types.compute"
_INT = re.compile(r"-?\d+")

# FieldDescriptor.type numbers (descriptor.proto), to avoid importing protobuf's untyped module.
_DOUBLE, _FLOAT, _INT64, _UINT64, _INT32, _FIXED64, _FIXED32, _BOOL, _STRING = range(1, 10)
_MESSAGE, _BYTES, _UINT32, _ENUM = 11, 12, 13, 14
_SFIXED32, _SFIXED64, _SINT32, _SINT64 = 15, 16, 17, 18
_INTS = {_INT64, _UINT64, _INT32, _FIXED64, _FIXED32, _UINT32, _SFIXED32, _SFIXED64, _SINT32,
         _SINT64}  # fmt: skip
_TYPE_NAMES = {_DOUBLE: "TYPE_DOUBLE", _FLOAT: "TYPE_FLOAT", _INT64: "TYPE_INT64",
               _UINT64: "TYPE_UINT64", _INT32: "TYPE_INT32", _UINT32: "TYPE_UINT32",
               _BOOL: "TYPE_BOOL", _STRING: "TYPE_STRING", _BYTES: "TYPE_BYTES"}  # fmt: skip


def require() -> None:
    """Fails at once, with the fix, when google-cloud-compute is not installed."""
    try:
        found = importlib.util.find_spec("google.cloud.compute_v1") is not None
    except ModuleNotFoundError:  # no google.cloud at all
        found = False
    if not found:
        raise RuntimeError(MISSING)


@functools.cache
def types() -> Any:
    """google.cloud.compute_v1's types module (imported by name: it is 100,000 lines that
    mypy need not read)."""
    try:
        return importlib.import_module(_MODULE)
    except ImportError as exc:
        raise RuntimeError(MISSING) from exc


def check(kind: str, body: object) -> None:
    """Refuse `body` as Google would refuse it for a `kind` (one of KINDS) resource."""
    message = getattr(types(), kind)
    descriptor = message.pb().DESCRIPTOR
    _message(descriptor, body, "resource")
    try:
        message.from_json(json.dumps(body), ignore_unknown_fields=False)
    except Exception as exc:  # json_format.ParseError: anything the walk let through
        raise errors.bad_request(f"Invalid JSON payload received. {exc}") from None


def _message(descriptor: Any, value: object, path: str) -> None:
    if not isinstance(value, dict):
        raise _invalid_value(path, f"type.googleapis.com/{descriptor.full_name}", value)
    by_name = {f.json_name: f for f in descriptor.fields}
    by_name.update({f.name: f for f in descriptor.fields})
    for raw_name, raw in value.items():
        field = by_name.get(str(raw_name))
        if field is None:
            raise errors.bad_request(
                f"Invalid JSON payload received. Unknown name \"{raw_name}\" at '{path}': "
                "Cannot find field."
            )
        if raw is None:
            continue  # JSON null is "not set", for every proto3 field
        where = f"{path}.{field.json_name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            _map(field.message_type, raw, where)
        elif field.is_repeated:
            if not isinstance(raw, list):
                raise _invalid_value(where, "list", raw)
            for index, item in enumerate(raw):
                _single(descriptor, field, item, f"{where}[{index}]")
        else:
            _single(descriptor, field, raw, where)


def _map(entry: Any, value: object, path: str) -> None:
    if not isinstance(value, dict):
        raise _invalid_value(path, "map", value)
    field = entry.fields_by_name["value"]
    for key, item in value.items():
        _single(entry, field, item, f"{path}[{key}]")


def _single(parent: Any, field: Any, value: object, path: str) -> None:
    kind = field.type
    if kind == _MESSAGE:
        _message(field.message_type, value, path)
        return
    ok = True
    if kind in (_STRING, _BYTES):
        ok = isinstance(value, str)
        if ok and kind == _STRING:
            _enum_value(parent, field, str(value), path)
    elif kind == _BOOL:
        ok = isinstance(value, bool)
    elif kind in _INTS:
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and _INT.fullmatch(value) is not None
        )
    elif kind in (_DOUBLE, _FLOAT):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == _ENUM:
        names = {v.name for v in field.enum_type.values}
        ok = value in names or (isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        raise _invalid_value(path, _TYPE_NAMES.get(kind, f"TYPE_{kind}"), value)


# Enum names the discovery document lists and google-cloud-compute 1.57's proto lacks (the
# client lags the API): ManagedInstance.targetStatus, research section 6.4 [DISCOVERY].
_NEWER = {"google.cloud.compute.v1.ManagedInstance.TargetStatus": {"RUNNING", "STOPPED",
                                                                    "SUSPENDED"}}  # fmt: skip


def _enum_value(parent: Any, field: Any, value: str, path: str) -> None:
    """A string field with a nested enum of its name takes only that enum's names."""
    enum = parent.enum_types_by_name.get("".join(p.title() for p in field.name.split("_")))
    if enum is None:
        return
    allowed = {v.name for v in enum.values if v.number != 0 or not v.name.startswith("UNDEFINED")}
    if value not in allowed | _NEWER.get(enum.full_name, set()):
        raise errors.invalid(path, value)


def _invalid_value(path: str, type_name: str, value: object) -> errors.ComputeError:
    shown = f'"{value}"' if isinstance(value, str) else json.dumps(value)
    # Reason `invalid`, as the emulator's other answers to a bad value (compute/errors.py).
    return errors.ComputeError(400, "invalid", f"Invalid value at '{path}' ({type_name}), {shown}")
