"""The container image, built once per session for the container tests."""

from __future__ import annotations

import pytest
from container_support import IMAGE, build


@pytest.fixture(scope="session")
def image() -> str:
    """localhost/tpucared:test, built from the repository's Dockerfile by deploy/image.sh."""
    seconds = build(IMAGE)
    print(f"image built in {seconds:.1f} s")
    return IMAGE
