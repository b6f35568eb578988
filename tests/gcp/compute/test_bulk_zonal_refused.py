"""Against a Compute Engine that refuses bulk mode on a zonal MIG (`compute_bulk_zonal =
"refuse"`: undocumented either way, docs/research/compute-engine.md §10 row M9), a flex-start
slot's create is INVALID before anything is made: the daemon backs off and tells a person once
(a hard error), never a loop of creates. A spot slice (INDIVIDUAL) is made as usual."""

from __future__ import annotations

from typing import Any

import pytest

from tpucared.core.model.specs import CapacityKind, ErrorKind
from tpucared.gcp.compute import ComputeCloud
from tpucared.gcp.errors import ApiError

from .support import ZONE, P, finished, shape


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    return {**emulator_options, "create_seconds": 0.1, "compute_bulk_zonal": "refuse"}


async def test_a_zonal_bulk_mig_refused_is_an_invalid_create(cloud: ComputeCloud) -> None:
    flex = shape(capacity=CapacityKind.FLEX_START, max_run_duration_s=3600)
    with pytest.raises(ApiError, match="regional") as caught:
        await cloud.create(P, ZONE, "iron-0", flex)
    assert caught.value.kind is ErrorKind.INVALID
    assert await cloud.client.list_migs(P, ZONE) == []
    spot = shape(topology="2x2x2", hosts=2)
    done = await finished(cloud, await cloud.create(P, ZONE, "iron-1", spot))
    assert done.error is None
