"""`record_interrupted_calls`: what became of the calls a previous process left in flight.

Runs once when the daemon starts (runtime/daemon.py), before any call of this process: no
call of the previous one can still be in flight, so a create intent (REQUESTED) or a delete
(DELETING) whose outcome was never recorded (calls.py records outcomes) gets the outcome a
call cut off by a dropped connection would have had, TRANSIENT. The planner then retries
after the short transient backoff (adopting the node if the create did go through) instead of
waiting out the `requested` / `deleting` timeouts.
"""

from __future__ import annotations

import structlog

from tpucared.core.model.records import IncarnationRecord
from tpucared.core.model.specs import ErrorKind
from tpucared.core.nodes import outcomes
from tpucared.runtime.clock import Clock
from tpucared.store import KEEP, StaleWrite, Store

log = structlog.get_logger(__name__)


async def record_interrupted_calls(store: Store, clock: Clock) -> list[IncarnationRecord]:
    """At start-up, before any call of this process: record the calls a previous process
    left without an outcome (see the module docstring). Returns the incarnations changed."""
    snapshot = await store.load_snapshot()
    now = clock.now()
    changed = []
    for inc in sorted(snapshot.nodes.values(), key=lambda i: i.id):
        what = outcomes.interrupted_call(inc.phase, inc.error)
        if what is None:
            continue
        message = f"the outcome of the {what} call was lost: tpucared stopped during it"
        try:
            async with store.write() as tx:
                create = what == "create"
                inc = await tx.record_outcome(
                    inc.id,
                    inc.phase,
                    now,
                    error=ErrorKind.TRANSIENT,
                    # A create's message is its slot's last error. A delete operation the
                    # previous run was waiting on is dropped: a repeated delete is harmless
                    # (CONFLICT while it runs, NOT_FOUND after).
                    last_error=message if create else KEEP,
                    operation=KEEP if create else None,
                    reason=f"{inc.node_name}: {message}",
                )
        except StaleWrite:
            continue
        log.info("call.interrupted", node=inc.node_name, call=what)
        changed.append(inc)
    return changed
