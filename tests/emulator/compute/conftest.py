"""Fixtures of the Compute Engine surface's tests (compute_support.py): fast timing, and the
raw-HTTP helper `http` of tests/emulator/conftest.py on the `emulator` fixture."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

# The helper module next to this file is imported by name, whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any]) -> dict[str, Any]:
    return {**emulator_options, "create_seconds": 0.1, "delete_seconds": 0.05}
