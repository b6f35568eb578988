"""tpucared.core stays pure: no I/O, no clock, no randomness, no other tpucared layer.

Walks the AST of every module in tpucared/core. Imports must come from an allowlist of
computational stdlib modules or from tpucared.core itself (an allowlist, not a blocklist: a
new import makes someone decide whether it belongs in the core). Calls that read the clock
or do I/O by themselves (`datetime.now()`, `open()`, `print()`...) are refused too: time and
data are passed in. import-linter enforces the same layering in CI; this test also covers
the standard library, which its contract only can with include_external_packages = true.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tpucared.core

CORE = Path(tpucared.core.__file__).parent

ALLOWED_MODULES = frozenset(
    {
        "__future__",
        "abc",
        "bisect",
        "collections",
        "dataclasses",
        "datetime",
        "difflib",
        "enum",
        "functools",
        "hashlib",
        "heapq",
        "itertools",
        "json",
        "math",
        "numbers",
        "operator",
        "re",
        "string",
        "textwrap",
        "types",
        "typing",
    }
)
# Module attributes that read the clock: time is an argument of everything in the core.
CLOCK_CALLS = frozenset({"now", "utcnow", "today", "time", "monotonic", "perf_counter"})
IO_BUILTINS = frozenset({"open", "print", "input", "exec", "eval", "__import__", "breakpoint"})


def violations(source: str, module: str = "tpucared.core.x") -> list[str]:
    found: list[str] = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            names = [alias.name for alias in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level:  # relative: inside tpucared.core by construction
                continue
            names = [n.module or ""]
        elif isinstance(n, ast.Call):
            func = n.func
            if isinstance(func, ast.Name) and func.id in IO_BUILTINS:
                found.append(f"line {n.lineno}: calls {func.id}()")
            if isinstance(func, ast.Attribute) and func.attr in CLOCK_CALLS:
                found.append(f"line {n.lineno}: reads the clock with .{func.attr}()")
            continue
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if name == "tpucared.core" or name.startswith("tpucared.core."):
                continue
            if top == "tpucared":
                found.append(f"line {n.lineno}: imports {name} (another tpucared layer)")
            elif top not in ALLOWED_MODULES:
                found.append(f"line {n.lineno}: imports {name}")
    return found


CORE_FILES = sorted(CORE.rglob("*.py"))


def test_core_has_modules() -> None:
    names = {p.relative_to(CORE).as_posix() for p in CORE_FILES}
    assert names >= {"model/specs.py", "model/lifecycle.py", "planning/planner.py"}


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.relative_to(CORE).as_posix())
def test_core_module_is_pure(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.relative_to(CORE).as_posix())
def test_core_module_introduces_itself(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc, f"{path.name} needs a module docstring saying what it owns"
    assert len(doc) > 40, f"{path.name}: say more than that in the module docstring"


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ("import asyncio", "imports asyncio"),
        ("import os.path", "imports os.path"),
        ("from aiohttp import web", "imports aiohttp"),
        ("import sqlalchemy.orm", "imports sqlalchemy.orm"),
        ("from structlog import get_logger", "imports structlog"),
        ("import google.auth", "imports google.auth"),
        ("import socket", "imports socket"),
        ("import subprocess", "imports subprocess"),
        ("import random", "imports random"),
        ("import time", "imports time"),
        ("from pathlib import Path", "imports pathlib"),
        ("from tpucared.store import Store", "imports tpucared.store (another tpucared layer)"),
        ("from tpucared import config", "imports tpucared (another tpucared layer)"),
        ("from datetime import datetime\nx = datetime.now()", "reads the clock with .now()"),
        ("import datetime\nx = datetime.date.today()", "reads the clock with .today()"),
        ("open('f')", "calls open()"),
        ("print(1)", "calls print()"),
    ],
)
def test_checker_catches(source: str, complaint: str) -> None:
    assert any(complaint in v for v in violations(source)), violations(source)


@pytest.mark.parametrize(
    "source",
    [
        "from __future__ import annotations",
        "from collections.abc import Mapping",
        "from tpucared.core.model.records import NodePhase",
        "from tpucared.core.nodes import create_backoff as budget",
        "from . import model",
        "from datetime import datetime, timedelta\nx = datetime(2025, 1, 1) + timedelta(1)",
    ],
)
def test_checker_allows(source: str) -> None:
    assert violations(source) == []
