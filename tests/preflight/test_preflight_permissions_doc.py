"""deploy/README.md's permissions block is the list `tpucared check` tests
(tpucared/preflight/permissions.py), group by group, in order."""

from __future__ import annotations

import re
from pathlib import Path

from tpucared.preflight.permissions import GROUPS, WHEN

README = Path(__file__).parents[2] / "deploy" / "README.md"
BLOCK = re.compile(
    r"<!-- permissions: tpucared/preflight/permissions.py -->\n```text\n(.*?)\n```", re.S
)


def test_deploy_readme_lists_the_permissions_the_check_tests() -> None:
    found = BLOCK.search(README.read_text(encoding="utf-8"))
    assert found, "deploy/README.md has no permissions block"
    groups: dict[str, list[str]] = {}
    when: dict[str, str] = {}
    current = ""
    for line in found.group(1).splitlines():
        if line.startswith("# "):
            current, _, what = line[2:].partition(": ")
            groups[current], when[current] = [], what
        else:
            groups[current].append(line)
    assert {g: tuple(p) for g, p in groups.items()} == GROUPS
    assert list(groups) == list(GROUPS)
    assert when == WHEN
