"""The request log: every /v2 request the emulator answered, for tests and benchmarks to inspect.

Bounded (oldest entries fall off) so a week-long demo cannot grow without limit. Served by
`GET /_emulator/v1/requests[?since=<epoch seconds>]` as a list of
`{method, path, query, status, time, fault}`; a dropped connection has status 0.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str
    query: dict[str, str]
    status: int  # 0 when the connection was dropped without a response
    time: float  # epoch seconds when the request arrived
    fault: str | None  # the injected fault kind, if any


class RequestLog:
    def __init__(self, maxlen: int = 100_000) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=maxlen)

    def __len__(self) -> int:
        return len(self._records)

    def add(self, record: RequestRecord) -> None:
        self._records.append(record)

    def clear(self) -> None:
        self._records.clear()

    def entries(self, since: float | None = None) -> list[dict[str, object]]:
        """Records in the order they completed; with `since`, only those that arrived after
        it. (Arrival order can differ from completion order under injected latency, so this
        filters instead of stopping at the first older record.)"""
        return [asdict(r) for r in self._records if since is None or r.time > since]
