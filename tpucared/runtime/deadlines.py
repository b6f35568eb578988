"""Deadlines on the cloud calls the daemon waits for: no single request holds up more than
its own location, slot or call (docs/daemon.md, "One tick"; docs/reliability.md).

`answered_within(seconds, what, call)` awaits one Cloud port call with a deadline: it sets
`ANSWER_BY` (ports/cloud.py), so the adapter starts no retry that could not finish in time,
and cancels the call at the deadline, raising `NoAnswer`, a `CloudError` of kind TRANSIENT:
every caller already handles a call that failed for a transient reason (the cloud calls
record it, the operation watcher polls again later), and whether a cut create or delete
reached the cloud is what the next lists show, as for any call whose answer was lost.

The limits, by what waits:
- a zone's list: runtime/nodes/observer.py (learnt per location, within the poll interval);
- an operation poll: `operation_poll_deadline(poll)`; each poll runs on its own, so a hung
  one delays only its own operation (runtime/nodes/operations.py);
- a create or delete POST: `MUTATION_DEADLINE_S`; it holds one of the `policy.max_creates`
  create places (or a delete place) at most that long;
- a sweep of shared resources (runtime/nodes/sweeps.py): `SWEEP_DEADLINE_S`, several deletes;
  in its own task, it holds no tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from tpucared.core.model.specs import ErrorKind
from tpucared.ports.cloud import ANSWER_BY, CloudError

T = TypeVar("T")

# The least time any call gets: a healthy request on a loaded 2-core machine fits in it.
MIN_DEADLINE_S = 2.0
# A create or delete POST: longer than any healthy one (the API answers with an operation at
# once), short enough that a hung one releases its create place soon.
MUTATION_DEADLINE_S = 30.0
# A sweep of shared resources: several deletes (templates, policies) and their lists.
SWEEP_DEADLINE_S = 120.0


def operation_poll_deadline(poll_interval: float) -> float:
    """An operations.get: the poll interval, never under `MIN_DEADLINE_S`."""
    return max(poll_interval, MIN_DEADLINE_S)


class NoAnswer(CloudError):
    """A cloud call cut at its deadline: its outcome is unknown (module docstring)."""

    kind = ErrorKind.TRANSIENT


async def answered_within(seconds: float, what: str, call: Awaitable[T]) -> T:
    """`await call`, cut after `seconds` (retries included) with `NoAnswer`."""
    loop = asyncio.get_running_loop()
    token = ANSWER_BY.set(loop.time() + seconds)
    try:
        async with asyncio.timeout(seconds) as deadline:
            return await call
    except TimeoutError:
        if not deadline.expired():
            raise
        raise NoAnswer(f"{what}: no answer within {seconds:g} s (retries included)") from None
    finally:
        ANSWER_BY.reset(token)
