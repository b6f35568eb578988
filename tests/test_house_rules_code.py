"""House rules for the daemon's code beyond module length (test_house_rules.py):

- functions stay short: at most `MAX_LONG` functions of each package (tpucared, and the
  emulator's own distribution, tpucared_emulator) over `LONG_LINES` lines, none over
  `MAX_FUNCTION_LINES` (a long function is split where its steps are, not squeezed);
- every log event has a stable dotted name (`zone.list_failed`) and is listed in docs/logs.md,
  and everything listed there is logged;
- names in docstrings and comments do not lie: a `something.py` / `.sh` file they mention
  exists in the repository, and a backticked dotted path into a tpucared package
  (`core.planning.tick`, `tpucared.inspect.status.status_lines`, `tpucared_emulator.server`)
  resolves to a module, or to a module and one of its names.

Both are checked on the source text, so a module renamed without its mentions fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tpucared"
# The emulator is a distribution of its own (emulator/), held to the same rules.
EMULATOR = ROOT / "emulator" / "tpucared_emulator"
PACKAGES = (PACKAGE, EMULATOR)

LONG_LINES = 60
MAX_LONG = 5
MAX_FUNCTION_LINES = 80

TOP_PACKAGES = "cli|config|core|demo|gcp|inspect|launch|notify|ports|runtime|ssh|store"
# `core.planning.tick` or `tpucared.core.planning.tick.plan_tick`, in backticks; config keys
# such as `ssh.probe_rate` or `gcp.project` are spelled the same way, hence the key list.
DOTTED = re.compile(
    rf"`(?:tpucared\.)?((?:{TOP_PACKAGES}|tpucared_emulator)(?:\.[a-z_][a-z0-9_]*)+)"
    r"(?![a-z0-9_])(?<!\.py)(?<!\.sh)"
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


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_functions_are_short(package: Path) -> None:
    long = long_functions(package)
    too_long = {name: n for name, n in long.items() if n > MAX_FUNCTION_LINES}
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"
    assert len(long) <= MAX_LONG, (
        f"{len(long)} functions over {LONG_LINES} lines (at most {MAX_LONG}): split one: {long}"
    )


def _module_names(root: Path = PACKAGE) -> set[str]:
    """tpucared's modules by their path inside it (`core.tick`); another package's by its full
    dotted name (`tpucared_emulator.server`)."""
    names: set[str] = set()
    prefix = () if root.name == "tpucared" else (root.name,)
    for path in root.rglob("*.py"):
        parts = prefix + path.relative_to(root).with_suffix("").parts
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


def stale_mentions(roots: tuple[Path, ...] = PACKAGES) -> list[str]:
    modules = set().union(*(_module_names(root) for root in roots))
    files = {p.name for p in ROOT.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts}
    stale: list[str] = []
    for path in sorted(path for root in roots for path in root.rglob("*.py")):
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


# Log events --------------------------------------------------------------------------------

EVENT_NAME = re.compile(r"[a-z_]+(\.[a-z_]+)+")
LEVELS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
# Events named by an expression, not a literal: the expression's text -> the names it gives
# (as docs/logs.md lists them). A new one must be added here and documented.
DYNAMIC_EVENTS: dict[str, frozenset[str]] = {
    "action.log_event": frozenset({"action.*"}),  # Action.log_event: action.create, ...
    "event[0]": frozenset({"zone.reachable", "zone.unreachable"}),  # core zone_health's kinds
    "JOB_FAILED": frozenset({"workload.job_failed"}),
    "JOB_RECOVERED": frozenset({"workload.job_recovered"}),
}
DOCUMENTED = re.compile(r"^\| `([a-z_.*]+)` \|", re.M)


def _is_logger_call(func: ast.expr, level_names: set[str]) -> bool:
    if isinstance(func, ast.Attribute) and func.attr in LEVELS:
        bound = isinstance(func.value, ast.Name) and func.value.id in level_names  # log.bind()
        return bound or re.search(r"\blog\b", ast.unparse(func.value)) is not None
    if isinstance(func, ast.Name):
        return func.id in level_names
    return (
        re.search(r"\blog\.(debug|info|warning|error|exception)\b|getattr\(log", ast.unparse(func))
        is not None
    )


def logged_events(*roots: Path) -> dict[str, set[str]]:
    """Every event the code logs (of both packages by default): name (or the expression naming
    it) -> modules."""
    found: dict[str, set[str]] = {}
    for root in roots or PACKAGES:
        found_in(root, found)
    return found


def found_in(root: Path, found: dict[str, set[str]]) -> None:
    """Adds the events logged under `root` to `found`."""
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        # Names bound to a level method (`level = log.info if ok else log.warning`) or to a
        # bound logger (`bound = log.bind(fleet=...)`).
        level_names = {
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and re.search(r"\blog\.", ast.unparse(node.value))
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and _is_logger_call(node.func, level_names):
                first = node.args[0]
                name = first.value if isinstance(first, ast.Constant) else ast.unparse(first)
                found.setdefault(str(name), set()).add(path.relative_to(root).as_posix())


def test_log_events_are_dotted_names_and_documented() -> None:
    documented = set(DOCUMENTED.findall((ROOT / "docs" / "logs.md").read_text()))
    names: set[str] = set()
    for event, where in logged_events().items():
        if event in DYNAMIC_EVENTS:
            names |= DYNAMIC_EVENTS[event]
            continue
        assert EVENT_NAME.fullmatch(event), (
            f"log event {event!r} ({sorted(where)}) is no dotted name"
        )
        names.add(event)
    assert not names - documented, f"not in docs/logs.md: {sorted(names - documented)}"
    assert not documented - names, (
        f"docs/logs.md lists what is not logged: {sorted(documented - names)}"
    )


def test_the_event_check_sees_every_way_of_logging(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "log = get_logger()\n"
        "def f(ok, n):\n"
        "    log.info('a.b', x=1)\n"
        "    level = log.info if ok else log.warning\n"
        "    level('c.d')\n"
        "    (log.warning if ok else log.debug)('e.f')\n"
        "    getattr(log, n)('g.h')\n"
        "    log.warning('a sentence')\n"
        "    bound = log.bind(x=1)\n"
        "    bound.info('i.j')\n"
        "    print('not.logged')\n"
    )
    assert set(logged_events(pkg)) == {"a.b", "c.d", "e.f", "g.h", "i.j", "a sentence"}
