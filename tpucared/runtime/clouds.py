"""The runtime's clouds: the registry of every cloud tpucared speaks (`KINDS`), one Cloud
port (tpucared/ports/cloud.py) per cloud API, and which one keeps a fleet's nodes.

A cloud is a `CloudKind`: its config rules (config/apis.py `ApiRules`: the `api` name a
fleet gives, its keys and their checks, the Google service preflight checks, if any) and
its connector (how the daemon opens its port; the port says what its cloud can do, in its
`abilities`). Adding a cloud is its module (an adapter, and a `CloudKind` of it) and one
line in `KINDS`, or a call to `register` (docs/daemon.md "Adding a cloud"); config and
preflight then know its name by the registry, the core by the abilities.

`connect_clouds` opens a port for every registered API (`down` and the observer may meet
nodes of fleets the config no longer lists). `CloudMap` is what the observer, the cloud calls,
the operation watcher and the workers' host keys hold: a configured fleet's cloud is the one of
its `FleetSpec.api`; a recorded node's is the one that made it (`IncarnationRecord.api`,
migration 0008), so a node of a fleet removed from the config is still polled and deleted
through its own cloud. A test injects its own ports (`Daemon(clouds=...)`). Nothing else in
the runtime names an implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tpucared.config import Config
from tpucared.config.apis import COMPUTE, TPU, ApiRules, register_api, unregister_api
from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import DEFAULT_API, FleetSpec
from tpucared.gcp.compute.cloud import ComputeCloud
from tpucared.gcp.tpu.cloud import TpuCloud
from tpucared.ports.cloud import Cloud, Clouds, TokenSource

RequestHook = Callable[[str, str, float], None]  # (call, status, seconds), e.g. /metrics
Connector = Callable[[Config, TokenSource, RequestHook | None], Cloud]


def _tpu(config: Config, tokens: TokenSource, on_request: RequestHook | None) -> Cloud:
    return TpuCloud.connect(config.gcp.endpoint, token_source=tokens, on_request=on_request)


def _compute(config: Config, tokens: TokenSource, on_request: RequestHook | None) -> Cloud:
    # Compute Engine beside the TPU API's endpoint (an emulator serves both on one port);
    # it lists only our owner's instances (a label filter), the others are not ours.
    return ComputeCloud.connect(
        config.gcp.endpoint,
        token_source=tokens,
        owner=config.daemon.owner,
        on_request=on_request,
    )


@dataclass(frozen=True)
class CloudKind:
    """One cloud tpucared speaks: what the config knows of it, and how to open its port."""

    rules: ApiRules  # its `api` name, keys, checks and preflight service (config/apis.py)
    connect: Connector


# Every cloud tpucared speaks: a new one is one more line here (or a `register` call).
KINDS: list[CloudKind] = [CloudKind(TPU, _tpu), CloudKind(COMPUTE, _compute)]
# The connectors by `FleetSpec.api`, filled by `register`.
CONNECTORS: dict[str, Connector] = {}


def register(kind: CloudKind) -> CloudKind:
    """Make `kind` a cloud fleets may name: its rules in the config's registry, its
    connector here (the same kind again: no change)."""
    register_api(kind.rules)
    CONNECTORS[kind.rules.api] = kind.connect
    return kind


@contextmanager
def registered(kind: CloudKind) -> Iterator[CloudKind]:
    """`kind` registered for a while (a test's own cloud), then forgotten again."""
    register(kind)
    try:
        yield kind
    finally:
        CONNECTORS.pop(kind.rules.api, None)
        unregister_api(kind.rules.api)


for _kind in KINDS:
    register(_kind)


def connect_clouds(
    config: Config, tokens: TokenSource, *, on_request: RequestHook | None = None
) -> dict[str, Cloud]:
    """A port for every cloud API tpucared speaks (the caller closes them: `Cloud.aclose`):
    a node recorded by one the config's fleets no longer use is still listed and deleted
    through it. A port makes no request until it is used."""
    return {api: CONNECTORS[api](config, tokens, on_request) for api in sorted(CONNECTORS)}


class CloudMap:
    """The ports by API, and which API each configured fleet uses."""

    def __init__(self, clouds: Clouds, fleets: Iterable[FleetSpec]) -> None:
        self.clouds = dict(clouds)
        self._api = {f.name: f.api for f in fleets}

    def api_of(self, fleet: str) -> str:
        return self._api.get(fleet, DEFAULT_API)

    def of(self, api: str) -> Cloud:
        return self.clouds[api]

    def for_fleet(self, fleet: str) -> Cloud:
        """The cloud of a configured fleet (a fleet the config does not list: the TPU API's;
        for a recorded node, `for_node` knows better)."""
        return self.clouds[self.api_of(fleet)]

    def for_node(self, inc: IncarnationRecord) -> Cloud:
        """The cloud that made (or adopted) a recorded node: its `api`, whatever its fleet
        is now, or whether the config still lists it."""
        return self.clouds[inc.api]
