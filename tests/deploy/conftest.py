"""The container image, built once per session for the container tests."""

from __future__ import annotations

import pytest
from container_support import EMULATOR_IMAGE, IMAGE, build


@pytest.fixture(scope="session")
def image() -> str:
    """localhost/tpucared:test, built from the repository's Dockerfile by deploy/image.sh."""
    seconds = build(IMAGE)
    print(f"image built in {seconds:.1f} s")
    return IMAGE


@pytest.fixture(scope="session")
def emulator_image(image: str) -> str:
    """The same Dockerfile with the `emulator` extra (the emulator's own wheel, emulator/, and
    Google's API types it checks every request body with): the emulator's container runs it;
    the daemon's runs the product image, which has no emulator. Built after `image`, so only
    its last layer differs."""
    seconds = build(EMULATOR_IMAGE, "--build-arg", "EXTRAS=emulator")
    print(f"emulator image built in {seconds:.1f} s")
    return EMULATOR_IMAGE
