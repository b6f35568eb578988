"""Accelerator type -> hosts/chips/topology, as GCP counts them (pure, table-driven)."""

from __future__ import annotations

import pytest

from tpucared_emulator.catalog import DEFAULT_ACCELERATOR_TYPES, Catalog
from tpucared_emulator.topology import (
    from_accelerator_config,
    parse_accelerator_type,
    workers_for,
)


@pytest.mark.parametrize(
    ("name", "workers", "chips", "topology"),
    [
        # v2/v3/v4/v5p: N TensorCores, 8 per host.
        ("v2-8", 1, 4, "2x2"),
        ("v2-32", 4, 16, "4x4"),
        ("v3-8", 1, 4, "2x2"),
        ("v3-128", 16, 64, "8x8"),
        ("v4-8", 1, 4, "2x2x1"),
        ("v4-16", 2, 8, "2x2x2"),
        ("v4-32", 4, 16, "2x2x4"),
        ("v4-64", 8, 32, "2x4x4"),
        ("v4-128", 16, 64, "4x4x4"),
        ("v4-4096", 512, 2048, "8x16x16"),
        ("v5p-8", 1, 4, "2x2x1"),
        ("v5p-128", 16, 64, "4x4x4"),
        # v5e/v6e: N chips; one host up to 8 chips, then 4 chips per host.
        ("v5litepod-1", 1, 1, "1x1"),
        ("v5litepod-4", 1, 4, "2x2"),
        ("v5litepod-8", 1, 8, "2x4"),
        ("v5litepod-16", 4, 16, "4x4"),
        ("v5litepod-32", 8, 32, "4x8"),
        ("v5litepod-256", 64, 256, "16x16"),
        ("v6e-1", 1, 1, "1x1"),
        ("v6e-8", 1, 8, "2x4"),
        ("v6e-16", 4, 16, "4x4"),
        ("v6e-256", 64, 256, "16x16"),
    ],
)
def test_shape_of_accelerator_types(name: str, workers: int, chips: int, topology: str) -> None:
    shape = parse_accelerator_type(name)
    assert (shape.workers, shape.chips, shape.topology) == (workers, chips, topology)
    assert workers_for(name) == workers
    # The AcceleratorConfig form names the same slice.
    assert from_accelerator_config(shape.generation.config_type, topology).name == name


@pytest.mark.parametrize("name", ["v4", "v4-", "v4-7", "v9-8", "tpu-8", "V4-8", "v4-0", "v4--8"])
def test_malformed_or_unknown_types_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="unknown accelerator type"):
        parse_accelerator_type(name)


@pytest.mark.parametrize(
    ("config_type", "topology"), [("V4", "2x2"), ("V6E", "2x2x1"), ("V4", "2xAx1"), ("V9", "1x1")]
)
def test_accelerator_config_must_match_its_generation(config_type: str, topology: str) -> None:
    with pytest.raises(ValueError, match=r"not valid for|unsupported accelerator config"):
        from_accelerator_config(config_type, topology)


def test_default_catalog_has_the_common_types_in_every_zone() -> None:
    catalog = Catalog.default()
    for name in ("v2-8", "v3-2048", "v4-4096", "v5litepod-256", "v5p-8", "v6e-256"):
        assert name in DEFAULT_ACCELERATOR_TYPES
        assert all(catalog.offers(zone, name) for zone in catalog.zones())
    assert "us-central2-b" in catalog.zones()
    # Sorted by family, then by size (not as strings: v2-128 after v2-32).
    assert catalog.accelerator_types("us-central2-b")[:3] == ["v2-8", "v2-32", "v2-128"]
