"""Values with their own syntax: durations, names, zones, labels, machine types and the like.

Each is an `Annotated` type that `schema.py` puts on a field; a value that does not fit is
refused with "expected WHAT, got VALUE", VALUE shown as the user wrote it in TOML
(`as_written`, also used by the other modules' messages).

Durations are strings: "500ms", "30s", "10m", "24h", "2d", "1h30m". Plain numbers are
refused (is 30 seconds or minutes?) with a hint to write "30s".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from tpucared.core.model import durations
from tpucared.core.model.machines import MACHINE_TYPES


def as_written(value: object) -> str:
    """A value as the user wrote it in TOML, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return str(value)


def _fail(expected: str, value: object) -> PydanticCustomError:
    return PydanticCustomError(
        "tpucared",
        "expected {expected}, got {got}",
        {
            "expected": expected,
            "got": as_written(value),
        },
    )


_DURATION_EXPECTED = 'a duration string like "30s", "10m", "24h" or "1h30m"'


def parse_duration(value: object) -> timedelta:
    """A config duration: a string for core.durations.parse (plain numbers are refused)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise PydanticCustomError(
            "tpucared",
            'expected {expected}, got the bare number {got} (write "{got}s" for seconds)',
            {"expected": _DURATION_EXPECTED, "got": as_written(value)},
        )
    if not isinstance(value, str):
        raise _fail(_DURATION_EXPECTED, value)
    try:
        return durations.parse(value)
    except ValueError:
        raise _fail(f"{_DURATION_EXPECTED}, at most a year", value) from None


def _duration_or_never(value: object) -> timedelta | None:
    if value == "never":
        return None
    try:
        return parse_duration(value)
    except PydanticCustomError:
        raise _fail(f'{_DURATION_EXPECTED}, or "never"', value) from None


def pattern(regex: str, expected: str) -> BeforeValidator:
    compiled = re.compile(regex)

    def check(value: object) -> str:
        if not isinstance(value, str) or not compiled.fullmatch(value):
            raise _fail(expected, value)
        return value

    return BeforeValidator(check)


def one_or_more(expected: str) -> BeforeValidator:
    """One value or a list of them, as a list: `project = "p"` or `project = ["p", "q"]`."""

    def check(value: object) -> object:
        return _unique(expected, [value] if isinstance(value, str) else value)

    return BeforeValidator(check)


def unique_list(expected: str) -> BeforeValidator:
    """A list with no item twice, and not empty (`expected` says what it should hold)."""
    return BeforeValidator(lambda value: _unique(expected, value))


def _unique(expected: str, value: object) -> object:
    if isinstance(value, list):
        dupes = sorted({str(v) for v in value if value.count(v) > 1})
        if dupes:
            raise PydanticCustomError(
                "tpucared", "listed more than once: {dupes}", {"dupes": ", ".join(dupes)}
            )
        if not value:
            raise _fail(expected, value)
    return value


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
DurationOrNever = Annotated[timedelta | None, BeforeValidator(_duration_or_never)]
NonEmpty = Annotated[str, pattern(r"(?s).*\S.*", "a non-empty string")]
# RFC 1035 label, lowercase: what node ids and label values accept.
FleetName = Annotated[
    str,
    pattern(
        r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?",
        "a lowercase name: a letter, then letters, digits or '-', not ending in '-'",
    ),
]
# A region and a letter, or an AI zone's `ai` suffix ("us-central1-ai1a": TPU7x and v6e are
# offered there, tpu/docs/regions-zones; docs/research/compute-engine.md §1.2).
ZONE_PATTERN = r"[a-z]+-[a-z]+[0-9]+-(?:[a-z]|ai[0-9]+[a-z]?)"
Zone = Annotated[str, pattern(ZONE_PATTERN, 'a zone like "us-central2-b" or "us-central1-ai1a"')]
AcceleratorType = Annotated[
    str,
    pattern(r"v[0-9]+[a-z]*-[1-9][0-9]*", 'an accelerator type like "v4-32" or "v5litepod-16"'),
]
# The clouds a fleet may name in `api`: the keys of the runtime's Cloud ports
# (runtime/clouds.py `KINDS`, each adapter's own `API`). The core knows none of them: it
# decides on what each cloud can do (core/model/abilities.py). Here only a name's shape:
# which names are known is the registry's (config/apis.py `APIS`), asked in pass two, so a
# cloud registered by the runtime (or a test) is known without editing this file.
TPU_API = "tpu"  # the Cloud TPU API: a fleet's cloud unless it names another (DEFAULT_API)
COMPUTE_API = "compute"  # Compute Engine: one TPU VM (an instance, or a MIG) per slot
Api = Annotated[
    str,
    pattern(r"[a-z][a-z0-9-]{0,30}", 'a cloud API\'s name like "tpu" or "compute"'),
]
# A `compute` fleet's machine type: one of the known table (core/model/machines.py), or one
# line naming them all.
MachineTypeName = Annotated[
    str,
    pattern(
        "|".join(re.escape(name) for name in MACHINE_TYPES),
        f"a TPU machine type ({', '.join(MACHINE_TYPES)})",
    ),
]
Image = Annotated[
    str,
    pattern(
        r"projects/[a-z][-a-z0-9.:]*[a-z0-9]/global/images/(?:family/)?[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?",
        'an image like "projects/P/global/images/family/F" or "projects/P/global/images/I"',
    ),
]
OnPreemption = Annotated[
    str,
    pattern(
        r"stop|delete",
        '"stop" (the VM stays, TERMINATED, until tpucared deletes it) or "delete"',
    ),
]
# A multi-host slice's shape (issue 28): chips along each axis, "4x4" or "2x2x4"; whether the
# machine type makes it is a rule across keys (apis.py).
Topology = Annotated[str, pattern(r"[1-9][0-9]*(?:x[1-9][0-9]*){1,2}", 'a topology like "2x2x4"')]
RuntimeVersion = Annotated[
    str, pattern(r"[a-z0-9][a-z0-9._-]*", 'a runtime version like "tpu-ubuntu2204-base"')
]
LabelKey = Annotated[
    str,
    pattern(
        r"[a-z][a-z0-9_-]{0,62}",
        "a label key: a lowercase letter, then up to 62 lowercase letters, digits, '_' or '-'",
    ),
]
LabelValue = Annotated[
    str,
    pattern(r"[a-z0-9_-]{0,63}", "a label value: up to 63 lowercase letters, digits, '_' or '-'"),
]
Owner = Annotated[
    str,
    pattern(
        r"[a-z0-9][a-z0-9_-]{0,62}",
        "an owner id: up to 63 lowercase letters, digits, '_' or '-', not starting with '_'/'-'",
    ),
]
EnvName = Annotated[
    str,
    pattern(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name like WANDB_API_KEY"),
]
StopSignal = Annotated[
    str,
    pattern(
        r"(?:SIG)?(?:TERM|INT|HUP|USR1|USR2|QUIT)",
        "a signal the workload can trap: TERM, INT, HUP, USR1, USR2 or QUIT",
    ),
]
Project = Annotated[
    str,
    pattern(
        r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]",
        'a project id like "my-project" (6-30 lowercase letters, digits or "-")',
    ),
]
UserName = Annotated[str, pattern(r"[a-z_][a-z0-9_-]{0,31}", 'a Unix user name like "tpucared"')]
