"""Operations followed with the cloud's wait instead of polls (issue 44): which, how many, when.

A cloud whose abilities say `operation_wait` (Compute Engine: zoneOperations.wait) answers
one request when the operation ends: a failing create's outcome is seen at once, with one
request, where the poll schedule cost up to three `zoneOperations.get` (0.5, 1.5, 3.5 s) until
the zone's first poll was learnt (core/nodes/op_timing.py; again after each success), about
one after that, and saw each outcome up to a poll late (measured: the same ~16 requests a
hunting minute either way, docs/daemon.md "API requests"). The operation watcher
(runtime/nodes/operations.py) asks `waiter` whether an operation can be waited on, holds a
`WaitPlaces` place for each one it waits on, cuts each wait at `WAIT_DEADLINE_S`, and sends
the next wait, after an answer that was not DONE, no sooner than `next_wait_in` says.

Google's wait "waits for no more than the 2 minutes and then returns the current state of
the operation, which might be DONE or still in progress", and "might return after zero
seconds" when the server is overloaded (docs/research/compute-engine.md §2.6). Nothing here
decides anything about the operation itself: the watcher records its end as for a poll.
"""

from __future__ import annotations

from tpucared.ports.cloud import Cloud, OperationWaits

# A wait's deadline: longer than Google holds one (~2 minutes, research §2.6), so that the
# server's own limit, not ours, ends a healthy wait (its answer, not DONE, is followed by the
# next wait). A wait cut here counts as a failed poll.
WAIT_DEADLINE_S = 150.0
# The most operations one watcher follows with waits at once: each holds an HTTP connection
# for up to 2 minutes, and the gcp clients' aiohttp session allows 100 connections at once
# (aiohttp's TCPConnector default `limit`; none per host), shared by the cloud's creates,
# deletes, lists and polls. Beyond it an operation is polled with get, as before waits, and
# takes a place when one frees at its next poll: a big fleet's creates never hold every
# connection, and its lists and creates never queue behind held waits.
MAX_HELD_WAITS = 32
# After an answer that was not DONE, the next wait goes no sooner than min(n, this) seconds
# after the previous one was sent, n the answers not DONE so far: gcloud's Compute Engine
# waiter sleeps 1, 2 ... 5 s after each answer not DONE (docs/benchmarks.md names its
# source). A pace from the send rather than a sleep after the answer: a server that answers
# at once every time costs at most one wait per 5 s per operation (the poll schedule's own
# cap), and a wait the server held its full 2 minutes is followed at once, not 1-5 s late.
WAIT_PACE_CAP_S = 5.0


def waiter(cloud: Cloud, operation: str) -> OperationWaits | None:
    """`cloud` as one that can wait on `operation`, or None (its abilities say it cannot, or
    not this operation: the watcher polls it)."""
    if not cloud.abilities.operation_wait or not isinstance(cloud, OperationWaits):
        return None
    return cloud if cloud.waits_on(operation) else None


def next_wait_in(not_done: int, held_for: float) -> float:
    """Seconds from now to the next wait of an operation whose last wait answered not DONE
    (`not_done` such answers so far, the last after `held_for` seconds)."""
    return max(0.0, min(float(not_done), WAIT_PACE_CAP_S) - held_for)


class WaitPlaces:
    """The operations a watcher follows with waits, at most `limit` at once (by name)."""

    def __init__(self, limit: int = MAX_HELD_WAITS) -> None:
        self.limit = limit
        self._held: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self._held

    def __len__(self) -> int:
        return len(self._held)

    def take(self, name: str) -> bool:
        """Hold a place for `name` if one is free (or it holds one already)."""
        if name in self._held:
            return True
        if len(self._held) >= self.limit:
            return False
        self._held.add(name)
        return True

    def release(self, name: str) -> None:
        self._held.discard(name)
