"""Problems with a config, worded as the one-line messages it reports.

Pydantic's problems with the shape become `KEY: what is expected` (`shape_problems`); the
rules across keys (`build.py`, `guard.py`, `node_options.py`) add theirs, as (KEY, message),
to a `Problems` (`problems.py`).
KEY is a dotted TOML path and an item of `[[fleet]]` is named by its name
(`fleet "sweep": workload.max_failures`); `load.py` puts the file in front. An unknown key
gets a "did you mean" from the keys `schema.py` allows there, and whatever was written
under `secrets` is never echoed.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from tpucared.config.schema import ConfigFile
from tpucared.config.syntax import as_written
from tpucared.core.vocab.stuck import DEFAULT_TIMEOUTS


def shape_problems(exc: ValidationError, data: Mapping[str, Any]) -> list[str]:
    """One `KEY: message` line per problem in `exc`, duplicates dropped, in order."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        key = _key(loc, data)
        lines.append(f"{key}: {_message(err, loc)}")
    return list(dict.fromkeys(lines))


def _key(loc: tuple[int | str, ...], data: Mapping[str, Any]) -> str:
    """A dotted TOML path; an item of [[fleet]] is named by its name when it has one."""
    # pydantic marks a problem with a table's key (not its value) by a trailing "[key]".
    if loc and loc[-1] == "[key]":
        loc = loc[:-1]
    if len(loc) >= 2 and loc[0] == "fleet" and isinstance(loc[1], int):
        index = loc[1]
        fleets = data.get("fleet")
        item = fleets[index] if isinstance(fleets, list) and index < len(fleets) else None
        name = item.get("name") if isinstance(item, dict) else None
        head = (
            f"fleet {json.dumps(name)}"
            if isinstance(name, str) and name
            else (f"fleet #{index + 1}")
        )
        rest = dotted(loc[2:])
        return f"{head}: {rest}" if rest else head
    return dotted(loc) or "(top level)"


def dotted(loc: Sequence[int | str]) -> str:
    """A TOML key path: `a.b[0]."c d"` (keys that are not bare are quoted)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            piece = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part)
            out += f".{piece}" if out else piece
    return out


def _message(err: Any, loc: tuple[int | str, ...]) -> str:
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return "required, but missing"
    if "secrets" in loc and kind in ("model_type", "model_attributes_type", "dict_type"):
        # Never echo what was written here: it may be the secret itself.
        return 'expected { env = "VARIABLE" }: the name of the daemon\'s environment variable '
        "that holds the secret (secret values never go in the config)"
    if kind == "extra_forbidden":
        known = _known_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        allowed = f"; allowed here: {', '.join(known)}" if known and not close else ""
        return f"unknown key{hint}{allowed}"
    simple = {
        "int_type": "an integer",
        "int_from_float": "an integer",
        "bool_type": "true or false",
        "string_type": "a string",
        "float_type": "a number",
        "list_type": "a list",
        "dict_type": "a table",
        "model_type": "a table",
        "model_attributes_type": "a table",
    }
    if kind in simple:
        return f"expected {simple[kind]}, got {as_written(value)}"
    bounds = {
        "greater_than_equal": ">=",
        "greater_than": ">",
        "less_than_equal": "<=",
        "less_than": "<",
    }
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"expected a number {bounds[kind]} {limit}, got {as_written(value)}"
    if kind == "enum":
        return f"expected one of {ctx.get('expected')}, got {as_written(value)}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"expected at most {ctx.get('max_length')} item(s)"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def _known_keys(loc: Sequence[int | str]) -> list[str]:
    """The keys the table at `loc` accepts (for "did you mean")."""
    tp: Any = ConfigFile
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(part, int):
            args = get_args(tp)
            tp = args[0] if args else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part)
            tp = field.annotation if field else None
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return list(tp.model_fields)
    if tp is None and loc and loc[-1] == "timeouts":
        return list(DEFAULT_TIMEOUTS)
    return []


def _unwrap(tp: Any) -> Any:
    """Strip Annotated[...] and `| None` to the type that holds the keys."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, UnionType):
            options = [a for a in get_args(tp) if a is not type(None)]
            tp = options[0] if len(options) == 1 else None
        else:
            return tp
