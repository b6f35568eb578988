"""House rules for the daemon's code beyond module length (test_house_rules.py):

- functions stay short: at most `MAX_LONG` functions of tpucared over `LONG_LINES` lines, none
  over `MAX_FUNCTION_LINES` (a long function is split where its steps are, not squeezed);
- names in docstrings and comments do not lie: a `something.py` / `.sh` file they mention
  exists in the repository, and a backticked dotted path into a tpucared package
  (`core.planning.tick`, `tpucared.inspect.status.status_lines`) resolves to a module, or
  to a module and one of its names.

Both are checked on the source text, so a module renamed without its mentions fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tpucared"

LONG_LINES = 60
MAX_LONG = 5
MAX_FUNCTION_LINES = 80

TOP_PACKAGES = "cli|config|core|demo|emulator|gcp|inspect|launch|notify|ports|runtime|ssh|store"
# `core.planning.tick` or `tpucared.core.planning.tick.plan_tick`, in backticks; config keys
# such as `ssh.probe_rate` or `gcp.project` are spelled the same way, hence the key list.
DOTTED = re.compile(
    rf"`(?:tpucared\.)?((?:{TOP_PACKAGES})(?:\.[a-z_][a-z0-9_]*)+)(?![a-z0-9_])(?<!\.py)(?<!\.sh)"
)
FILE_NAME = re.compile(r"\b([a-z_][a-z0-9_]*\.(?:py|sh))\b")
# Config sections whose keys read like module paths (`ssh.probe_rate`, `gcp.project`).
CONFIG_SECTIONS = ("daemon", "gcp", "ssh", "policy", "guard", "notify")
# File names that stand for the user's own files in examples, not for ours.
USERS_FILES = frozenset({"train.py"})  # `tpucared babysit ... -- python3 train.py`


def long_functions(root: Path = PACKAGE) -> dict[str, int]:
    """`path:function` -> lines, for every function longer than LONG_LINES."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONG_LINES:
                    found[f"{path.relative_to(root.parent).as_posix()}:{node.name}"] = lines
    return found


def test_functions_are_short() -> None:
    long = long_functions()
    too_long = {name: n for name, n in long.items() if n > MAX_FUNCTION_LINES}
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"
    assert len(long) <= MAX_LONG, (
        f"{len(long)} functions over {LONG_LINES} lines (at most {MAX_LONG}): split one: {long}"
    )


def _module_names(root: Path = PACKAGE) -> set[str]:
    names: set[str] = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.add(".".join(parts))
    return names


def resolves(dotted: str, modules: set[str]) -> bool:
    """A module, or a module and one name in it (`inspect.status.status_lines`)."""
    if dotted in modules:
        return True
    head, _, _ = dotted.rpartition(".")
    return head in modules and head != dotted.split(".")[0]


def stale_mentions(root: Path = PACKAGE) -> list[str]:
    modules = _module_names(root)
    files = {p.name for p in ROOT.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts}
    stale: list[str] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(ROOT).as_posix()
        stale += [
            f"{where}: {name}"
            for name in set(FILE_NAME.findall(text))
            if name not in files | USERS_FILES
        ]
        for dotted in set(DOTTED.findall(text)):
            if dotted.split(".")[0] in CONFIG_SECTIONS and dotted.count(".") == 1:
                continue  # a config key, e.g. `ssh.probe_rate`
            if not resolves(dotted, modules):
                stale.append(f"{where}: {dotted}")
    return sorted(stale)


def test_docstrings_name_modules_that_exist() -> None:
    stale = stale_mentions()
    assert not stale, "names of modules or files that do not exist:\n" + "\n".join(stale)


def test_the_checks_can_fail(tmp_path: Path) -> None:
    pkg = tmp_path / "tpucared"
    (pkg / "core").mkdir(parents=True)
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "tick.py").write_text(
        '"""Planned by `core.tick.plan`; see `core.gone` and `core.tick.plan.deeper`."""\n'
        + "def f():\n"
        + "    x = 1\n" * (LONG_LINES + 1)
    )
    assert resolves("core.tick.plan", _module_names(pkg))
    assert not resolves("core.gone", _module_names(pkg))
    assert not resolves("core.tick.plan.deeper", _module_names(pkg))
    assert list(long_functions(pkg).values()) == [LONG_LINES + 2]
