"""What the emulated cloud offers: zones, the accelerator types in each, runtime versions, and
the Compute Engine TPU machine types (`MACHINE_TYPES`) in each Compute Engine zone.

The catalog answers "does zone Z exist" and "is type T offered in zone Z"; a create naming an
unknown zone or type fails the way GCP fails (see errors.py). By default every common type is
offered in every default zone; tests and demos pass their own mapping to model scarcity. The
Compute Engine surface (compute/) asks the same of machine types (`has_compute_zone`,
`offers_machine`); its zones are the TPU API's plus the ones only Compute Engine serves TPU7x in,
and `TOPOLOGY_HOSTS` says how many VMs a multi-host slice of each machine type has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tpucared_emulator.topology import AcceleratorShape, Generation, parse_accelerator_type

DEFAULT_ZONES: tuple[str, ...] = (
    "us-central1-a",
    "us-central1-b",
    "us-central1-f",
    "us-central2-b",
    "us-east1-d",
    "us-east5-a",
    "us-south1-a",
    "europe-west4-a",
    "europe-west4-b",
    "asia-northeast1-b",
)


def _series(prefix: str, counts: Iterable[int]) -> tuple[str, ...]:
    return tuple(f"{prefix}-{n}" for n in counts)


def _powers(low: int, high: int) -> list[int]:
    return [n for n in (2**i for i in range(20)) if low <= n <= high]


DEFAULT_ACCELERATOR_TYPES: tuple[str, ...] = (
    *_series("v2", (8, 32, 128, 256, 512)),
    *_series("v3", (8, 32, *_powers(64, 2048))),
    *_series("v4", _powers(8, 4096)),
    *_series("v5litepod", (1, 4, 8, 16, 32, 64, 128, 256)),
    *_series("v5p", _powers(8, 8192)),
    *_series("v6e", (1, 4, 8, 16, 32, 64, 128, 256)),
)

DEFAULT_RUNTIME_VERSIONS: tuple[str, ...] = (
    "tpu-ubuntu2204-base",
    "tpu-vm-base",
    "tpu-vm-tf-2.16.1-pjrt",
    "tpu-vm-tf-2.16.1-pod-pjrt",
    "tpu-vm-tf-2.17.0-pjrt",
    "tpu-vm-tf-2.17.0-pod-pjrt",
    "tpu-vm-v4-base",
    "tpu-vm-v4-pt-2.0",
    "v2-alpha-tpuv5",
    "v2-alpha-tpuv5-lite",
    "v2-alpha-tpuv6e",
)


@dataclass(frozen=True)
class MachineType:
    """A Compute Engine TPU machine type (docs/research/compute-engine.md section 1.1): the
    `-Nt` suffix is the chip count per VM. vCPUs and memory are documented for v5p only
    (208 vCPU, 448 GB); the others are plausible figures, unconfirmed (research section 9,
    row 19): the daemon must read only the chip count."""

    name: str  # "tpu7x-standard-4t"
    family: str  # "tpu7x", "ct6e", "ct5p"
    chips: int
    guest_cpus: int
    memory_mb: int
    accelerator: str  # guestAcceleratorType: GKE's spelling, the compute one is unconfirmed

    def shape(self) -> AcceleratorShape:
        """The one-host slice a VM of this type is (what the simulated worker hosts see)."""
        generation = Generation(self.family, self.family.upper(), counts_cores=False, dims=2)
        return AcceleratorShape(self.name, generation, self.chips, self.chips, 1, f"1x{self.chips}")


MACHINE_TYPES: dict[str, MachineType] = {
    m.name: m
    for m in (
        MachineType("tpu7x-standard-4t", "tpu7x", 4, 224, 960 * 1024, "tpu7x"),
        MachineType("ct6e-standard-1t", "ct6e", 1, 44, 176 * 1024, "tpu-v6e-slice"),
        MachineType("ct6e-standard-4t", "ct6e", 4, 180, 720 * 1024, "tpu-v6e-slice"),
        MachineType("ct6e-standard-8t", "ct6e", 8, 180, 1440 * 1024, "tpu-v6e-slice"),
        MachineType("ct5p-hightpu-4t", "ct5p", 4, 208, 448 * 1024, "tpu-v5p-slice"),
    )
}

# Machine type -> {accelerator topology: hosts}: how many VMs a MIG with a workload policy of
# that topology must have (docs/research/compute-engine.md section 6.8). The cloud's own table:
# the emulator checks a MIG's targetSize against it, whatever the daemon believes.
TOPOLOGY_HOSTS: dict[str, dict[str, int]] = {
    "tpu7x-standard-4t": {"2x2x1": 1, "2x2x2": 2, "2x2x4": 4, "2x4x4": 8, "4x4x4": 16,
                          "4x4x8": 32, "4x8x8": 64, "8x8x8": 128, "8x8x16": 256, "8x16x16": 512},
    "ct6e-standard-1t": {"1x1": 1},
    "ct6e-standard-4t": {"2x2": 1, "4x4": 4, "4x8": 8, "8x8": 16, "8x16": 32, "16x16": 64},
    "ct6e-standard-8t": {"2x4": 1},
    "ct5p-hightpu-4t": {"2x2x1": 1, "2x2x2": 2, "2x4x4": 8, "4x4x4": 16, "4x4x8": 32,
                        "4x8x8": 64, "8x8x8": 128, "8x8x16": 256, "8x16x16": 512,
                        "16x16x16": 1024, "16x16x24": 1536},
}  # fmt: skip

# Compute Engine zones: the TPU API's, plus those where Compute Engine serves TPU7x and v6e
# (research section 1.2).
DEFAULT_COMPUTE_ZONES: tuple[str, ...] = tuple(
    sorted({*DEFAULT_ZONES, "us-central1-c", "us-east5-b", "us-central1-ai1a", "us-south1-ai1b"})
)


class Catalog:
    """Zones and what they offer. Immutable after construction."""

    def __init__(
        self,
        offerings: Mapping[str, Iterable[str]],
        runtime_versions: Iterable[str] = DEFAULT_RUNTIME_VERSIONS,
        machines: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        """`machines`: Compute Engine zone -> TPU machine types offered there; None: every
        type of `MACHINE_TYPES` in every zone of `DEFAULT_COMPUTE_ZONES`."""
        if machines is None:
            machines = {zone: tuple(MACHINE_TYPES) for zone in DEFAULT_COMPUTE_ZONES}
        self._machines: dict[str, frozenset[str]] = {}
        for zone, names in machines.items():
            unknown = set(names) - set(MACHINE_TYPES)
            if unknown:
                raise ValueError(f"unknown TPU machine types {sorted(unknown)}")
            self._machines[zone] = frozenset(names)
        self._offerings: dict[str, frozenset[str]] = {}
        for zone, types in offerings.items():
            types = frozenset(types)
            for name in types:
                parse_accelerator_type(name)  # fail at start-up, not on the first create
            self._offerings[zone] = types
        self.runtime_versions: tuple[str, ...] = tuple(sorted(runtime_versions))

    @classmethod
    def default(
        cls,
        zones: Iterable[str] = DEFAULT_ZONES,
        accelerator_types: Iterable[str] = DEFAULT_ACCELERATOR_TYPES,
    ) -> Catalog:
        types = tuple(accelerator_types)
        return cls({zone: types for zone in zones})

    def zones(self) -> list[str]:
        return sorted(self._offerings)

    def has_zone(self, zone: str) -> bool:
        return zone in self._offerings

    def offers(self, zone: str, accelerator_type: str) -> bool:
        return accelerator_type in self._offerings.get(zone, frozenset())

    def compute_zones(self) -> list[str]:
        return sorted(self._machines)

    def has_compute_zone(self, zone: str) -> bool:
        return zone in self._machines

    def offers_machine(self, zone: str, machine_type: str) -> bool:
        return machine_type in self._machines.get(zone, frozenset())

    @staticmethod
    def is_machine_type(name: str) -> bool:
        """Whether `name` is a TPU machine type (else it is an accelerator type or unknown)."""
        return name in MACHINE_TYPES

    def accelerator_types(self, zone: str) -> list[str]:
        """Sorted the way people read them: by family, then by size."""
        return sorted(self._offerings.get(zone, ()), key=_type_sort_key)


def _type_sort_key(name: str) -> tuple[str, int]:
    prefix, _, count = name.rpartition("-")
    return prefix, int(count)
