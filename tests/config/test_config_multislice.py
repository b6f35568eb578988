"""The config file's multislice keys (issue 13): `slices`, `multislice_hold`, and what they
change elsewhere (node-name length, reserved labels, guard.max_nodes counting slices)."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_support import MINIMAL, fleet, load, problems


def test_slices_and_hold_load_with_their_defaults(tmp_path: Path) -> None:
    (one,) = load(tmp_path, MINIMAL).fleets
    assert (one.slices, one.multislice_hold, one.multislice) == (1, 1800.0, False)
    (big,) = load(tmp_path, fleet('slices = 4\nmultislice_hold = "10m"')).fleets
    assert (big.slices, big.multislice_hold, big.multislice, big.nodes) == (4, 600.0, True, 8)
    assert [big.node_name(1, i) for i in range(2)] == ["sweep-1-0", "sweep-1-1"]


def test_a_single_slice_fleet_keeps_its_spec_hash(tmp_path: Path) -> None:
    # Stored fleets from before multislice must not read as changed specs.
    (before,) = load(tmp_path, MINIMAL).fleets
    (explicit,) = load(tmp_path, fleet("slices = 1")).fleets
    assert before.spec_hash() == explicit.spec_hash()
    (multi,) = load(tmp_path, fleet("slices = 2")).fleets
    assert multi.spec_hash() != before.spec_hash()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (fleet("slices = 0"), "slices: expected a number >= 1, got 0"),
        (fleet('multislice_hold = "5m"'), "multislice_hold: needs slices > 1"),
        (fleet('labels = {tpucared-slice = "1"}'), "labels.tpucared-slice: reserved"),
        (
            MINIMAL.replace('name = "sweep"', f'name = "{"s" * 59}"') + "slices = 20\n",
            "node names are " + "s" * 59 + "-<slot>-<slice>",
        ),
        (
            fleet("slices = 3") + "[guard]\nmax_nodes = 5\n",
            "guard.max_nodes: the fleets ask for 6 nodes (sweep 2x3 slices), more than the 5",
        ),
    ],
    ids=["zero-slices", "hold-without-slices", "reserved-label", "name-too-long", "guard"],
)
def test_mistakes(tmp_path: Path, text: str, expected: str) -> None:
    found = problems(tmp_path, text)
    assert any(expected in line for line in found), found
