"""The problems found by the rules across keys, gathered before any is reported.

`Problems` is what pass two of loading (`build.py`, `guard.py`, `node_options.py`) adds its
(KEY, message) pairs to; `load.py` turns them into `ConfigError` lines next to pydantic's
(`messages.py`). It sits below both so that the schema's own checks can report without
importing the wording of pydantic's problems (which reads the schema).
"""

from __future__ import annotations


class Problems:
    """The (KEY, message) pairs found so far; true when there is any."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, key: str, message: str) -> None:
        self.items.append((key, message))

    def __bool__(self) -> bool:
        return bool(self.items)
