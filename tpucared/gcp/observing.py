"""What both adapters' `observe_zone` share (tpu/observe.py, compute/observe.py).

- `NodeCache`: one zone's nodes as converted at its previous successful list. A node listed
  exactly as then keeps its `ObservedNode` (`convert_cached`): at 10,000 nodes, converting
  every node every tick cost more than the planning. Comparing the two JSON objects is cheap
  (`is` first: with a `PageMemo`, an unchanged page's items are the last list's own objects)
  and the conversion is a pure function of them, so the result is the same either way.
- `refuse_duplicates`: a node listed twice in one list (say READY and PREEMPTED) is an
  inconsistent observation, not evidence either way: the zone is unknown for the tick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

from tpucared.core.model.observed import ObservedNode
from tpucared.gcp.fields import MalformedResource

# Resource name -> (the node's JSON as last listed, its conversion): one zone's nodes.
NodeCache = MutableMapping[str, tuple[Mapping[str, Any], ObservedNode]]
Converter = Callable[[str, Mapping[str, Any]], ObservedNode]  # (zone, JSON) -> node


def convert_cached(
    zone: str,
    item: Mapping[str, Any],
    cache: NodeCache | None,
    fresh: dict[str, tuple[Mapping[str, Any], ObservedNode]],
    convert: Converter,
) -> ObservedNode:
    """`convert(zone, item)`, or the cached node if `item` is as last listed; what this list
    made of it goes into `fresh` (the caller's next cache, once the whole list succeeded)."""
    name = item.get("name")
    if cache is None or not isinstance(name, str):
        return convert(zone, item)
    seen = cache.get(name)
    same = seen is not None and (seen[0] is item or seen[0] == item)
    node = seen[1] if same and seen is not None else convert(zone, item)
    fresh[name] = (item, node)
    return node


def refuse_duplicates(nodes: Iterable[ObservedNode]) -> None:
    """MalformedResource if a node is listed twice (see the module docstring)."""
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise MalformedResource(f"node {node.name} listed twice in one list")
        seen.add(node.name)
