"""The `filter` of compute v1 lists, as far as the daemon and Google's samples use it.

Syntax (the `filter` parameter of instances.list / zoneOperations.list, research sections 4.3
and 5.1): AIP-160 terms `FIELD OP VALUE` with OP one of `=`, `!=`, `:` (`:*` = has the field),
joined by `AND` (or juxtaposed), each term optionally in parentheses; or the regex form
`FIELD eq REGEX` / `FIELD ne REGEX`. FIELD is a dotted path into the resource
(`labels.tpucared-owner`, `operationType`, `targetLink`, `status`, `name`). VALUE is bare or
double-quoted. `OR` and mixing the two forms are refused with 400 `invalid`, as the real API
refuses what it does not understand.

    matcher = parse('labels.tpucared-owner = "abc" AND status != TERMINATED')
    matcher(instance.to_json())  -> bool
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tpucared_emulator.compute.errors import ComputeError

Matcher = Callable[[dict[str, Any]], bool]

_TERM = re.compile(
    r"""\s*\(?\s*
        (?P<field>[A-Za-z_][\w.\-]*)\s*
        (?P<op>!=|=|:|\s+eq\s+|\s+ne\s+)\s*
        (?P<value>"(?:[^"\\]|\\.)*"|[^\s()]+)
        \s*\)?\s*""",
    re.X,
)
_AND = re.compile(r"\s*AND\s+|\s+(?=\S)")


def invalid_filter(text: str) -> ComputeError:
    return ComputeError(
        400,
        "invalid",
        f"Invalid value for field 'filter': '{text}'. Invalid list filter expression.",
    )


def parse(text: str | None) -> Matcher:
    """A predicate on a rendered resource; 400 `invalid` for what it cannot read."""
    if text is None or not text.strip():
        return lambda _: True
    terms: list[Matcher] = []
    forms: set[str] = set()
    pos = 0
    while pos < len(text):
        match = _TERM.match(text, pos)
        if match is None:
            raise invalid_filter(text)
        op = match["op"].strip()
        forms.add("regex" if op in ("eq", "ne") else "aip")
        terms.append(_term(match["field"], op, _unquote(match["value"]), text))
        pos = match.end()
        joiner = _AND.match(text, pos)
        if joiner is not None and pos < len(text):
            pos = joiner.end()
    if len(forms) > 1:
        raise invalid_filter(text)
    return lambda resource: all(term(resource) for term in terms)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def _lookup(resource: dict[str, Any], path: str) -> Any:
    value: Any = resource
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _term(field: str, op: str, value: str, text: str) -> Matcher:
    if field in ("OR", "NOT") or value in ("OR",):
        raise invalid_filter(text)
    if op in ("eq", "ne"):
        try:
            pattern = re.compile(value)
        except re.error:
            raise invalid_filter(text) from None
        wanted = op == "eq"
        return lambda r: (
            (
                (found := _text(_lookup(r, field))) is not None
                and pattern.fullmatch(found) is not None
            )
            == wanted
        )
    if op == ":":
        if value == "*":
            return lambda r: _lookup(r, field) is not None
        return lambda r: value in (_text(_lookup(r, field)) or "")
    if op == "=":
        return lambda r: _text(_lookup(r, field)) == value
    return lambda r: _text(_lookup(r, field)) != value
