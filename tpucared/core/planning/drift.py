"""Spec drift: a fleet's serving nodes made otherwise than its spec now asks.

Editing a fleet never recreates healthy nodes (that would throw away running work); the
planner's notices say which nodes differ and that they are replaced only when they die. This
module compares one listed node with the fleet's `NodeOptions`, for what the API lists back:
network, subnetwork, service account, tags. Only what the spec sets is compared (a spec without
a network accepts the project's default), and network paths by their last segment, since the
API may answer a short name with the full path.
"""

from __future__ import annotations

from tpucared.core.model.observed import NodeMade
from tpucared.core.model.specs import NodeOptions


def compared(asked: NodeOptions) -> bool:
    """Whether `differences` can find anything for a fleet asking `asked`: only the options
    a listed node shows are compared (not, say, Compute Engine's on_preemption)."""
    return bool(
        asked.network is not None
        or asked.subnetwork is not None
        or asked.service_account is not None
        or asked.tags
    )


def differences(asked: NodeOptions, made: NodeMade) -> list[str]:
    """`what: asked X, has Y` for each option the node was made otherwise with."""
    out = []
    for what, want, have in (
        ("network", asked.network, made.network),
        ("subnetwork", asked.subnetwork, made.subnetwork),
    ):
        if want is not None and have is not None and _last(want) != _last(have):
            out.append(f"{what} {_last(have)} (asks {_last(want)})")
    if asked.service_account is not None and made.service_account != asked.service_account:
        out.append(
            f"service account {made.service_account or 'default'} (asks {asked.service_account})"
        )
    if asked.tags and set(made.tags) != set(asked.tags):
        out.append(f"tags {sorted(made.tags)} (asks {sorted(asked.tags)})")
    return out


def _last(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
