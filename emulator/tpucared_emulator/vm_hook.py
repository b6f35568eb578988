"""The seam between the lifecycle and the Compute Engine instances: `VmBook`, and `NoVms`.

The lifecycle (lifecycle.py) owns the one timer heap and the reset; the instances are
compute/book.py's `ComputeBook`, which attaches itself to the state as `vms`. This protocol is
all the lifecycle (and persistence.py) sees of it, so neither imports the compute package; its
managed instance groups, templates and workload policies are persisted beside the instances.
"""

from __future__ import annotations

from typing import Any, Protocol


class VmBook(Protocol):
    """What the lifecycle tells the Compute Engine instances (compute/book.py's `ComputeBook`,
    which attaches itself as `vms`): their timers, capacity that grew or freed (flex-start
    VMs waiting for it), a reset, and the persisted snapshot."""

    def tick(self, key: str, generation: int, now: float) -> None: ...

    def provision_waiting(self, now: float) -> None: ...

    def reset(self) -> None: ...

    def snapshot(self) -> list[dict[str, Any]]: ...

    def restore(self, snapshot: list[dict[str, Any]]) -> None: ...

    def snapshot_groups(self) -> dict[str, Any]: ...

    def restore_groups(self, snapshot: dict[str, Any]) -> None: ...


class NoVms:
    """The lifecycle without the Compute Engine surface (a bare `EmulatorState`)."""

    def tick(self, key: str, generation: int, now: float) -> None:
        return None

    def provision_waiting(self, now: float) -> None:
        return None

    def reset(self) -> None:
        return None

    def snapshot(self) -> list[dict[str, Any]]:
        return []

    def restore(self, snapshot: list[dict[str, Any]]) -> None:
        if snapshot:
            raise ValueError("this emulator state has no Compute Engine surface")

    def snapshot_groups(self) -> dict[str, Any]:
        return {}

    def restore_groups(self, snapshot: dict[str, Any]) -> None:
        if snapshot:
            raise ValueError("this emulator state has no Compute Engine surface")
