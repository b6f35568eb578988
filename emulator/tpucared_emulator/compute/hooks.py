"""The seam between the instances (compute/book.py) and what builds on them: `Target`, `Groups`.

The book records operations about any `Target` (an instance, a MIG, a template, a policy) and
tells the managed instance groups (compute/migs.py's `Migs`, which attaches itself to the book
as `groups`) about their members through `Groups`, so the book never imports the groups.
"""

from __future__ import annotations

from typing import Any, Protocol

from tpucared_emulator.compute.resources import Instance


class Target(Protocol):
    """What an operation is about: an instance, a MIG, a template or a policy."""

    @property
    def self_link(self) -> str: ...

    @property
    def uid(self) -> int: ...


class Groups(Protocol):
    """What the book tells the managed instance groups (compute/migs.py's `Migs`, which
    attaches itself as `groups`): their timers, a change to one of their members, a reset,
    and the persisted snapshot."""

    def tick(self, key: str, now: float) -> None: ...

    def member_changed(self, inst: Instance) -> None: ...

    def reset(self) -> None: ...

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, snapshot: dict[str, Any]) -> None: ...


class NoGroups:
    def tick(self, key: str, now: float) -> None:
        return None

    def member_changed(self, inst: Instance) -> None:
        return None

    def reset(self) -> None:
        return None

    def snapshot(self) -> dict[str, Any]:
        return {}

    def restore(self, snapshot: dict[str, Any]) -> None:
        if snapshot:
            raise ValueError("this emulator state has no managed instance groups")
