"""The benchmark harness: `python -m bench.run [--quick] [--only NAME ...] [--output-dir DIR]`.

Every benchmark is a module of this package with `run(quick: bool) -> dict`, registered by
name in `BENCHMARKS`: adding one is one line there. Optional module hooks: `render(result) ->
str` (the table printed after the run) and `versions() -> dict[str, str | None]` (tool
versions added to the envelope's, e.g. parallel-ssh's).

Each result is written to `<output dir>/<name>.json` (quick runs: `<name>-quick.json`, so a
quick run never replaces the committed full one) inside an envelope saying when, on what
machine and with which versions it was measured. `make bench` runs everything in full mode,
`make bench-quick` in quick mode.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import common

# name -> module with run(quick: bool) -> dict (see the module docstring).
BENCHMARKS: dict[str, str] = {
    "fanout": "bench.fanout",
    "detection": "bench.detection",
    "recovery": "bench.recovery",
    "capacity": "bench.capacity",
    "scale": "bench.scale",
    "notice": "bench.notice",
    "takeover": "bench.takeover",
    "writerate": "bench.writerate",
    "ledger": "bench.ledger",
    "maintenance": "bench.maintenance",
}

RunFunction = Callable[[bool], dict[str, Any]]


def load(name: str) -> ModuleType:
    try:
        module_name = BENCHMARKS[name]
    except KeyError:
        raise SystemExit(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}") from None
    module = importlib.import_module(module_name)
    if not callable(getattr(module, "run", None)):
        raise TypeError(f"{module_name} has no run(quick: bool) -> dict")
    return module


def result_path(output_dir: Path, name: str, quick: bool) -> Path:
    return output_dir / (f"{name}-quick.json" if quick else f"{name}.json")


def invoked_as(name: str, quick: bool) -> str:
    """The command that makes this result again: this process's own command line when it is
    a benchmark's module (`python -m bench.capacity --api compute --suffix=-n30`: its options
    decide the result), else bench.run's for the benchmark."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    module = spec.name.removesuffix(".__main__") if spec is not None else ""
    if module.startswith("bench.") and module != "bench.run":
        return shlex.join(["python", "-m", module, *sys.argv[1:]])
    return "python -m bench.run" + (" --quick" if quick else "") + f" --only {name}"


def run_one(
    name: str,
    run: RunFunction,
    *,
    quick: bool,
    output_dir: Path,
    extra_versions: Callable[[], dict[str, str | None]] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Run one benchmark and write its result in the envelope; returns (path, envelope)."""
    started_at = common.now_utc()
    host = common.machine()
    started = time.monotonic()
    result = run(quick)
    envelope = {
        "benchmark": name,
        "mode": "quick" if quick else "full",
        "command": invoked_as(name, quick),
        "started": started_at,
        "finished": common.now_utc(),
        "duration_s": round(time.monotonic() - started, 1),
        "machine": {**host, "load_average_at_end": common.load_average()},
        "versions": common.versions(extra_versions() if extra_versions else {}),
        "result": result,
    }
    path = result_path(output_dir, name, quick)
    common.write_json(path, envelope)
    return path, envelope


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        choices=list(BENCHMARKS),
        help="run only this benchmark (repeatable)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=common.RESULTS_DIR,
        help="where result JSON files go (default: bench/results)",
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(BENCHMARKS))
        return 0
    names = args.only or list(BENCHMARKS)
    for name in names:
        module = load(name)
        print(f"== {name} ({'quick' if args.quick else 'full'})", flush=True)
        path, envelope = run_one(
            name,
            module.run,
            quick=args.quick,
            output_dir=args.output_dir,
            extra_versions=getattr(module, "versions", None),
        )
        render = getattr(module, "render", None)
        if callable(render):
            print(render(envelope["result"]))
        print(f"== {name}: {envelope['duration_s']} s, written to {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
