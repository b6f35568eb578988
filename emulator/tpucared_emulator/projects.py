"""Project numbers: what the emulated cloud writes where Google writes a project's number.

Google gives every project a number beside its id and writes the number, not the id, in
some places: a MIG member's `created-by` metadata (`projects/776293755095/zones/us-west2-b/
instanceGroupManagers/...` in a real instance dump, issue 39), quota errors' consumer
(`project_number:...`), Compute Engine's projects.get `id` and Resource Manager's
`projectNumber`. A client that compares such a value with the project id it was configured
with is wrong on a real project; the emulator makes it wrong here too. The number is derived
from the id (stable across restarts of the emulator, different per project) and 12 digits
long, as Google's are.
"""

from __future__ import annotations

import hashlib


def project_number(project: str) -> str:
    """The emulated project's number: 12 decimal digits, the first not 0."""
    digest = int.from_bytes(hashlib.sha256(project.encode()).digest()[:8], "big")
    return str(10**11 + digest % (9 * 10**11))
