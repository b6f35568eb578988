"""What a preflight check concludes: one `CheckResult` per check, and the report they make.

Pure values (no I/O): the checks (checks.py) return them, `tpucared check` prints them as one
line each (`ok|WARN|FAIL name: detail`, a FAIL's fix after "; fix: ") or as JSON, and
`tpucared run` logs the WARN and FAIL ones at start (runtime/daemon.py). A FAIL means the
daemon would fail with this config on this project; a WARN that something could not be
confirmed or is likely to hurt later (a quota that allows fewer nodes than the fleet keeps).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "ok"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True)
class CheckResult:
    name: str  # stable, e.g. "type[sweep/us-central2-b]"; the JSON's key
    status: Status
    detail: str  # what was asked and what the answer says
    fix: str | None = None  # for a FAIL (or a WARN): what a person does about it

    def line(self) -> str:
        tail = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.status.value} {self.name}: {self.detail}{tail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "fix": self.fix,
        }


def ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name, Status.OK, detail)


def warn(name: str, detail: str, fix: str | None = None) -> CheckResult:
    return CheckResult(name, Status.WARN, detail, fix)


def fail(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, Status.FAIL, detail, fix)


def render(results: Sequence[CheckResult]) -> str:
    """One line per check, then a count."""
    lines = [r.line() for r in results]
    failed = sum(r.status is Status.FAIL for r in results)
    warned = sum(r.status is Status.WARN for r in results)
    lines.append(f"{len(results)} checks: {failed} FAIL, {warned} WARN")
    return "\n".join(lines)


def to_json(results: Sequence[CheckResult]) -> str:
    return json.dumps(
        {
            "ok": not any(r.status is Status.FAIL for r in results),
            "checks": [r.to_json() for r in results],
        },
        indent=2,
    )


def exit_code(results: Sequence[CheckResult]) -> int:
    """1 on any FAIL, else 0 (a WARN never fails the command)."""
    return 1 if any(r.status is Status.FAIL for r in results) else 0
