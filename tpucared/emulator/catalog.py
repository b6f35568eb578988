"""What the emulated cloud offers: zones, the accelerator types in each, runtime versions.

The catalog answers "does zone Z exist" and "is type T offered in zone Z"; a create naming an
unknown zone or type fails the way GCP fails (see errors.py). By default every common type is
offered in every default zone; tests and demos pass their own mapping to model scarcity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tpucared.emulator.topology import parse_accelerator_type

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


class Catalog:
    """Zones and what they offer. Immutable after construction."""

    def __init__(
        self,
        offerings: Mapping[str, Iterable[str]],
        runtime_versions: Iterable[str] = DEFAULT_RUNTIME_VERSIONS,
    ) -> None:
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

    def accelerator_types(self, zone: str) -> list[str]:
        """Sorted the way people read them: by family, then by size."""
        return sorted(self._offerings.get(zone, ()), key=_type_sort_key)


def _type_sort_key(name: str) -> tuple[str, int]:
    prefix, _, count = name.rpartition("-")
    return prefix, int(count)
