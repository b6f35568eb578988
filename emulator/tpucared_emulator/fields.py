"""Partial responses: the `fields` system parameter, as Google's front end applies it.

Every Google REST API accepts `fields` ("Selector specifying which fields to include in a
partial response", a global parameter of the TPU v2 discovery document) and returns only the
selected fields. The daemon asks for the few node fields it reads when it lists a zone
(gcp/tpu/observe.py), which halves what it parses at every poll; the emulator must honour it or
it would hide what the daemon depends on. Syntax (https://cloud.google.com/apis/docs/
system-parameters and the partial-response guide of Google's REST APIs):

    fields   := selector ("," selector)*
    selector := name ("/" name)* ["(" fields ")"]

`a/b` selects field b inside a; `a(b,c)` selects b and c inside a; `*` selects every field;
a selection inside a list applies to each element; a selected field that is absent is left
out. Whitespace is ignored. Anything else is INVALID_ARGUMENT, as Google answers it.

`PartialMemo` is the server's: a list's resources are the nodes' own rendered dicts, replaced
(never changed in place) when something they show changes (resources.py), so the partial
form of one is remembered by its identity, and a page of the very same partial resources is
not encoded again. At 10,000 nodes listed every poll, selecting the fields and encoding the
pages afresh was most of the emulator's work (the scale benchmark, issue 17). Pages are encoded
by orjson: in a preemption storm every page changes at every poll, and the standard library
took about 13 ms a 1,000-node page (orjson under 1 ms), in the emulator's one thread, on the
cores the daemon under test uses (issue 31).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from tpucared_emulator.errors import invalid_argument

# A selection: field name -> what to keep of it (None: all of it).
Selection = dict[str, "Selection | None"]

_TOKEN = re.compile(r"\s*([A-Za-z_@$][\w@$.]*|\*|[,/()])")


def parse(text: str) -> Selection:
    """The selection a `fields` value names; INVALID_ARGUMENT if it does not parse."""
    tokens = _tokens(text)
    selection, rest = _fields(tokens, 0)
    if rest != len(tokens):
        raise _invalid(text)
    return selection


def apply(data: Any, selection: Selection | None) -> Any:
    """`data` (a JSON value) with only the selected fields."""
    if selection is None or _whole(selection):
        return data
    if isinstance(data, list):
        return [apply(item, selection) for item in data]
    if not isinstance(data, dict):
        return data  # a selection below a scalar selects the scalar
    return {key: apply(data[key], sub) for key, sub in selection.items() if key in data}


class PartialMemo:
    """`apply` for whole responses, remembering what it made of each resource in a list.

    An entry holds the resource itself, so its identity cannot be reused by another object
    while the entry lives; entries of resources since re-rendered are dropped wholesale once
    there are more than `limit` (the next list selects afresh)."""

    def __init__(self, limit: int = 50_000) -> None:
        self._limit = limit
        self._seen: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        # The last body sent for each (selection, first resource) and the partial it encodes.
        self._bodies: dict[tuple[str, int], tuple[dict[str, Any], bytes]] = {}

    def body(self, data: Any, selection: Selection, text: str) -> bytes:
        """The JSON body of `apply(data, selection)`; a list page whose partial resources are
        the very ones of the last body sent for it is not encoded again."""
        out = self.apply(data, selection, text)
        if not isinstance(out, dict):
            return orjson.dumps(out)
        first = next((v[0] for v in out.values() if isinstance(v, list) and v), None)
        key = (text, id(first))
        last = self._bodies.get(key)
        if last is not None and _same(last[0], out):
            return last[1]
        if len(self._bodies) > 1000:
            self._bodies.clear()
        raw = orjson.dumps(out)
        # The entry holds `out`, hence `first`: its id cannot name another object meanwhile.
        self._bodies[key] = (out, raw)
        return raw

    def apply(self, data: Any, selection: Selection | None, text: str) -> Any:
        """`apply(data, selection)`; `text` is the `fields` value `selection` was parsed from."""
        if not isinstance(data, dict) or selection is None or _whole(selection):
            return apply(data, selection)
        if len(self._seen) > self._limit:
            self._seen.clear()
        out: dict[str, Any] = {}
        for key, sub in selection.items():
            if key not in data:
                continue
            value = data[key]
            if isinstance(value, list) and sub is not None and not _whole(sub):
                out[key] = [self._element(item, sub, (text, key, id(item))) for item in value]
            else:
                out[key] = apply(value, sub)
        return out

    def _element(self, item: Any, selection: Selection, key: tuple[str, str, int]) -> Any:
        seen = self._seen.get(key)
        if seen is not None and seen[0] is item:
            return seen[1]
        partial = apply(item, selection)
        self._seen[key] = (item, partial)
        return partial


def _same(last: dict[str, Any], out: dict[str, Any]) -> bool:
    """Whether `out` encodes as `last` did: lists of the same objects, other values equal."""
    if last.keys() != out.keys():
        return False
    for key, value in out.items():
        before = last[key]
        if isinstance(value, list) and isinstance(before, list):
            if len(value) != len(before):
                return False
            if any(a is not b for a, b in zip(value, before, strict=True)):
                return False
        elif value != before:
            return False
    return True


def _whole(selection: Selection) -> bool:
    return "*" in selection and selection["*"] is None


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    stripped = text.rstrip()
    while pos < len(stripped):
        match = _TOKEN.match(stripped, pos)
        if match is None:
            raise _invalid(text)
        out.append(match.group(1))
        pos = match.end()
    if not out:
        raise _invalid(text)
    return out


def _fields(tokens: list[str], i: int) -> tuple[Selection, int]:
    selection: Selection = {}
    while True:
        i = _selector(tokens, i, selection)
        if i < len(tokens) and tokens[i] == ",":
            i += 1
            continue
        return selection, i


def _selector(tokens: list[str], i: int, into: Selection) -> int:
    path: list[str] = []
    while True:
        if i >= len(tokens) or tokens[i] in ",/()":
            raise _invalid(" ".join(tokens))
        path.append(tokens[i])
        i += 1
        if i < len(tokens) and tokens[i] == "/":
            i += 1
            continue
        break
    sub: Selection | None = None
    if i < len(tokens) and tokens[i] == "(":
        sub, i = _fields(tokens, i + 1)
        if i >= len(tokens) or tokens[i] != ")":
            raise _invalid(" ".join(tokens))
        i += 1
    _merge(into, path, sub)
    return i


def _merge(into: Selection, path: list[str], sub: Selection | None) -> None:
    """Add `path` (with `sub` below its last name) to `into`; a whole field stays whole."""
    node = into
    for name in path[:-1]:
        if name in node and node[name] is None:
            return  # already selected whole
        child = node.setdefault(name, {})
        assert child is not None
        node = child
    last = path[-1]
    if sub is None or node.get(last, {}) is None:
        node[last] = None
    else:
        existing = node.setdefault(last, {})
        assert existing is not None
        for key, value in sub.items():
            _merge(existing, [key], value)


def _invalid(text: str) -> Exception:
    return invalid_argument(f"Invalid field selection {text.strip()!r}", field="fields")
