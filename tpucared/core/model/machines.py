"""Compute Engine's TPU machine types: the ones a `compute` fleet may name, their chips, the
default boot image of their TPU generation, and the multi-host topologies each makes.

A `compute` fleet (issue 27) names a machine type instead of an accelerator type: one VM of
that type per slot. The table is what tpucared knows to be real (docs/research/compute-engine.md
§1.1, §1.3); a name outside it is a config error naming the known ones, not a 400 from the cloud
on every create. Chips per VM are the `-Nt` suffix of the name (1t = 1, 4t = 4, 8t = 8), which
holds for every type Google names; the table states them too and a test keeps the two in step.

A multi-host slice (issue 28) is `topology` on a machine type: `TOPOLOGIES` says how many VMs
(hosts) each takes, from SkyPilot's `_COMPUTE_TPU_TOPOLOGY_TO_VM_COUNT` and Google's v5p table
(docs/research/compute-engine.md §6.8). A pair outside it is a config error naming the valid ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

IMAGE_PROJECT = "ubuntu-os-accelerator-images"
_TPU7X_FAMILY = "ubuntu-accel-2404-amd64-tpu-tpu7x"
_V5_V6_FAMILY = "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"  # one family for v5e, v5p and v6e


@dataclass(frozen=True)
class MachineType:
    name: str  # "tpu7x-standard-4t"
    generation: str  # how Google names the TPU: "TPU7x", "v6e", "v5p"
    chips: int  # TPU chips on the one VM
    image_family: str  # in IMAGE_PROJECT

    @property
    def default_image(self) -> str:
        """The boot image a fleet of this type gets unless it names one (`image`)."""
        return f"projects/{IMAGE_PROJECT}/global/images/family/{self.image_family}"


MACHINE_TYPES: dict[str, MachineType] = {
    m.name: m
    for m in (
        MachineType("tpu7x-standard-4t", "TPU7x", 4, _TPU7X_FAMILY),
        MachineType("ct6e-standard-1t", "v6e", 1, _V5_V6_FAMILY),
        MachineType("ct6e-standard-4t", "v6e", 4, _V5_V6_FAMILY),
        MachineType("ct6e-standard-8t", "v6e", 8, _V5_V6_FAMILY),
        MachineType("ct5p-hightpu-4t", "v5p", 4, _V5_V6_FAMILY),
    )
}

_CHIPS = re.compile(r".*-([1-9][0-9]*)t")


def chips_of(machine_type: str) -> int | None:
    """Chips per VM by the name's `-Nt` suffix; None for a name without one."""
    found = _CHIPS.fullmatch(machine_type)
    return int(found.group(1)) if found else None


# machine type -> {topology: hosts}. One host is the single-VM path (an instance, no MIG).
TOPOLOGIES: dict[str, dict[str, int]] = {
    "tpu7x-standard-4t": {
        "2x2x1": 1,
        "2x2x2": 2,
        "2x2x4": 4,
        "2x4x4": 8,
        "4x4x4": 16,
        "4x4x8": 32,
        "4x8x8": 64,
        "8x8x8": 128,
        "8x8x16": 256,
        "8x16x16": 512,
    },
    "ct6e-standard-1t": {"1x1": 1},
    "ct6e-standard-4t": {"2x2": 1, "4x4": 4, "4x8": 8, "8x8": 16, "8x16": 32, "16x16": 64},
    "ct6e-standard-8t": {"2x4": 1},
    # v5p: hosts = chips / 4; Google's table has no 2x2x4.
    "ct5p-hightpu-4t": {
        "2x2x1": 1,
        "2x2x2": 2,
        "2x4x4": 8,
        "4x4x4": 16,
        "4x4x8": 32,
        "4x8x8": 64,
        "8x8x8": 128,
        "8x8x16": 256,
        "8x16x16": 512,
        "16x16x16": 1024,
        "16x16x24": 1536,
    },
}


def hosts_of(machine_type: str, topology: str | None) -> int | None:
    """The VMs a slice of `topology` takes on `machine_type` (1 without a topology); None for
    a pair not in `TOPOLOGIES`."""
    if topology is None:
        return 1
    return TOPOLOGIES.get(machine_type, {}).get(topology)
