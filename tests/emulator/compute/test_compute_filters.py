"""The `filter` expressions of compute v1 lists (compute/filters.py): the spellings the daemon
and Google's samples use match what they should, and what the emulator cannot read is a 400."""

from __future__ import annotations

from typing import Any

import pytest

from tpucared_emulator.compute.errors import ComputeError
from tpucared_emulator.compute.filters import parse

LINK = "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/iron-0"
VM: dict[str, Any] = {
    "name": "iron-0",
    "status": "RUNNING",
    "labels": {"tpucared-owner": "abc", "tpucared-fleet": "iron"},
}
OP: dict[str, Any] = {"operationType": "compute.instances.preempted", "targetLink": LINK}


@pytest.mark.parametrize(
    ("text", "resource", "expected"),
    [
        (None, VM, True),
        ("", VM, True),
        ("labels.tpucared-owner=abc", VM, True),
        ("labels.tpucared-owner=abd", VM, False),
        ('labels.tpucared-owner = "abc"', VM, True),
        ('labels.tpucared-owner="abc" AND labels.tpucared-fleet="iron"', VM, True),
        ('labels.tpucared-owner="abc" labels.tpucared-fleet="other"', VM, False),
        ('(labels.tpucared-owner = "abc") AND (status != "TERMINATED")', VM, True),
        ("status != RUNNING", VM, False),
        ("labels.tpucared-owner:*", VM, True),
        ("labels.missing:*", VM, False),
        ("name eq iron-.*", VM, True),
        ("name ne iron-.*", VM, False),
        ('operationType="compute.instances.preempted"', OP, True),
        (f'operationType="compute.instances.preempted" AND targetLink="{LINK}"', OP, True),
        (f'operationType="compute.instances.preempted" AND targetLink="{LINK}x"', OP, False),
        ('operationType="insert"', OP, False),
    ],
)
def test_matches(text: str | None, resource: dict[str, Any], expected: bool) -> None:
    assert parse(text)(resource) is expected


@pytest.mark.parametrize(
    "text", ["a = b OR c = d", "= b", 'name eq "(" ', "labels.x eq a AND labels.y = b", "("]
)
def test_what_it_cannot_read_is_a_400(text: str) -> None:
    with pytest.raises(ComputeError) as raised:
        parse(text)
    assert raised.value.http_status == 400
    assert raised.value.reason == "invalid"
