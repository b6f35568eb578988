"""What `tpucared events` prints: one line per event, readable or JSON.

A readable line is `TIME  FLEET/SLOT  NODE  KIND  MESSAGE`, padded so that consecutive lines
line up without knowing the lines to come (`--follow` prints as events arrive). A JSON line
is one object with stable keys, for `jq` and log shippers.
"""

from __future__ import annotations

import json
from typing import Any

from tpucared.core.model.records import EventRecord
from tpucared.inspect.fmt import NONE, clock_time, iso, one_line

# Minimum widths: most fleet/slot pairs, node names and kinds fit, so columns line up.
_WHERE_WIDTH = 10
_NODE_WIDTH = 12
_KIND_WIDTH = 18


def event_line(e: EventRecord) -> str:
    if e.fleet is None:
        where = NONE
    elif e.slot is None:
        where = e.fleet
    else:
        where = f"{e.fleet}/{e.slot}"
    return "  ".join(
        [
            clock_time(e.at),
            where.ljust(_WHERE_WIDTH),
            (e.node or NONE).ljust(_NODE_WIDTH),
            e.kind.ljust(_KIND_WIDTH),
            one_line(e.message),
        ]
    ).rstrip()


def event_document(e: EventRecord) -> dict[str, Any]:
    return {
        "id": e.id,
        "at": iso(e.at),
        "kind": e.kind,
        "fleet": e.fleet,
        "slot": e.slot,
        "node": e.node,
        "message": e.message,
        "details": dict(e.details),
    }


def event_json(e: EventRecord) -> str:
    # default=str: details are JSON from the database, but a stray value must not kill a
    # long `--follow`.
    return json.dumps(event_document(e), sort_keys=True, default=str)
