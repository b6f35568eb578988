"""Accelerator types: how many workers (hosts) and chips a slice has, the way GCP counts them.

Pure functions used by the catalog (what exists), the state (how many network endpoints a node
gets) and the tests. Two naming conventions exist in the API:
- v2, v3, v4, v5p: the number in `v4-32` counts TensorCores; 2 cores per chip, 4 chips per host,
  so hosts = max(1, N / 8) (v4-8 has 1 host, v4-32 has 4).
- v5litepod (v5e), v6e: the number counts chips; a slice of up to 8 chips is a single host,
  larger slices have 4 chips per host (v6e-8 has 1 host, v6e-16 has 4).
`AcceleratorConfig{type, topology}` is the other way to ask for a slice; it maps to the same name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Generation:
    prefix: str  # "v4": the part of the accelerator type before the dash
    config_type: str  # AcceleratorConfig.Type enum name: "V4"
    counts_cores: bool  # True: N counts TensorCores (2 per chip); False: N counts chips
    dims: int  # topology dimensions: 2 ("4x4") or 3 ("2x2x4")


GENERATIONS: dict[str, Generation] = {
    g.prefix: g
    for g in (
        Generation("v2", "V2", counts_cores=True, dims=2),
        Generation("v3", "V3", counts_cores=True, dims=2),
        Generation("v4", "V4", counts_cores=True, dims=3),
        Generation("v5p", "V5P", counts_cores=True, dims=3),
        Generation("v5litepod", "V5LITE_POD", counts_cores=False, dims=2),
        Generation("v6e", "V6E", counts_cores=False, dims=2),
    )
}
_BY_CONFIG_TYPE = {g.config_type: g for g in GENERATIONS.values()}

CORES_PER_CHIP = 2
CHIPS_PER_HOST = 4
# v5e/v6e hosts carry up to 8 chips when the whole slice is one host.
MAX_SINGLE_HOST_CHIPS = 8


@dataclass(frozen=True)
class AcceleratorShape:
    name: str  # "v4-32"
    generation: Generation
    count: int  # the N of the name
    chips: int
    workers: int  # hosts, i.e. network endpoints of the node
    topology: str  # "2x2x4"

    def config(self) -> dict[str, str]:
        """AcceleratorConfig JSON for this shape."""
        return {"type": self.generation.config_type, "topology": self.topology}


def _workers(generation: Generation, chips: int) -> int:
    if generation.counts_cores:
        return max(1, chips // CHIPS_PER_HOST)
    if chips <= MAX_SINGLE_HOST_CHIPS:
        return 1
    return chips // CHIPS_PER_HOST


def _topology(chips: int, dims: int) -> str:
    """A plausible chip grid: start from 1x1 (2D) or 2x2x1 (3D) and double the smallest
    dimension (the last one on ties). Matches GCP's names for powers of two, e.g. v4-32 =
    2x2x4, v4-128 = 4x4x4, v5litepod-8 = 2x4, v5litepod-32 = 4x8."""
    if chips < 1 or chips & (chips - 1):
        return f"1x{chips}" if dims == 2 else f"1x1x{chips}"
    shape = [1, 1] if dims == 2 else [2, 2, 1]
    if dims == 3 and chips < 4:
        shape = [1, 1, chips]
    while math.prod(shape) < chips:
        smallest = min(shape)
        index = max(i for i, size in enumerate(shape) if size == smallest)
        shape[index] *= 2
    return "x".join(str(size) for size in shape)


def parse_accelerator_type(name: str) -> AcceleratorShape:
    """The shape of an accelerator type name; ValueError if it is not of a known family."""
    match = re.fullmatch(r"([a-z0-9]+)-(\d+)", name)
    if not match or match.group(1) not in GENERATIONS:
        raise ValueError(f"unknown accelerator type {name!r}")
    generation = GENERATIONS[match.group(1)]
    count = int(match.group(2))
    if count < 1 or (generation.counts_cores and count % CORES_PER_CHIP):
        raise ValueError(f"unknown accelerator type {name!r}")
    chips = count // CORES_PER_CHIP if generation.counts_cores else count
    return AcceleratorShape(
        name=name,
        generation=generation,
        count=count,
        chips=chips,
        workers=_workers(generation, chips),
        topology=_topology(chips, generation.dims),
    )


def from_accelerator_config(config_type: str, topology: str) -> AcceleratorShape:
    """The shape asked for by an AcceleratorConfig; ValueError if the topology is malformed."""
    generation = _BY_CONFIG_TYPE.get(config_type)
    if generation is None:
        raise ValueError(f"unsupported accelerator config type {config_type!r}")
    parts = topology.split("x")
    if len(parts) != generation.dims or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"topology {topology!r} is not valid for {config_type}")
    chips = math.prod(int(p) for p in parts)
    count = chips * CORES_PER_CHIP if generation.counts_cores else chips
    shape = parse_accelerator_type(f"{generation.prefix}-{count}")
    # Keep the user's own spelling of the grid (2x4 and 4x2 are the same slice size).
    return AcceleratorShape(
        name=shape.name,
        generation=generation,
        count=count,
        chips=chips,
        workers=shape.workers,
        topology=topology,
    )


def workers_for(name: str) -> int:
    return parse_accelerator_type(name).workers
