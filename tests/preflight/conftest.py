"""Fixtures of the preflight's tests: one emulator per module (in its own thread, so that
sync tests and CLI subprocesses can ask it), `control` to make checks fail (reset after each
test), and `run_check` to write a config against it and run every check. Helpers are in
preflight_support.py."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The helper module next to this file is imported by name, whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))

from preflight_support import Control, RunCheck, emulator_call, load

from tpucared.preflight import CheckResult, check_config
from tpucared_emulator import EmulatorOptions, EmulatorThread


@pytest.fixture(scope="module")
def emu() -> Iterator[EmulatorThread]:
    with EmulatorThread(EmulatorOptions(ssh_hosts=False)) as server:
        yield server


@pytest.fixture
def control(emu: EmulatorThread) -> Iterator[Control]:
    """`control(missing=[...], ...)`: PUT /_emulator/v1/preflight; reset after the test."""

    def put(**settings: Any) -> None:
        emulator_call(emu.url, "PUT", "/_emulator/v1/preflight", settings)

    yield put
    emulator_call(emu.url, "DELETE", "/_emulator/v1/preflight")


@pytest.fixture
def run_check(tmp_path: Path, emu: EmulatorThread) -> RunCheck:
    """Every check of a config against the module's emulator, by name."""

    def run(*fleets: Any, **tables: Any) -> dict[str, CheckResult]:
        config = load(tmp_path, emu.url, *fleets, **tables)
        results = asyncio.run(check_config(config))
        by_name = {r.name: r for r in results}
        assert len(by_name) == len(results), [r.name for r in results]
        return by_name

    return run
