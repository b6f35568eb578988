"""The intervals that tile one slot's [first create, now], each in exactly one category.

How an instant is classified:
1. A workload attempt running on it (no workload in the fleet: a node READY) is productive,
   cut short at the death of a node it ran on: from the cloud's loss on, it made no progress,
   even while the daemon had not yet noticed. When the attempt's progress file told its first
   step (core/workload/progress.py), its time before that step is PROGRAM_STARTUP; and when
   it ended by a loss or a crash, its time from its last checkpoint (none: its first step)
   to the loss is WASTED_PROGRESS_FROM_DISRUPTION, with the loss's cause and the steps lost
   (last step - last checkpoint). Without a progress file the attempt is productive whole.
2. Otherwise the instant belongs to the latest *disruption* at or before it: an attempt's end
   (FAILED or HUNG: a crash restart; PREEMPTED, or any end on a node that then died: a loss),
   a node's death (a loss, its category by `loss_cause`: maintenance, bad_host, crash or,
   for the rest and for None, INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION), a hold, or a spent
   budget. Before the first one it is the slot's first bring-up (startup, or capacity_wait
   while creates fail for capacity or quota). A slot done (or its fleet down) is idle in
   the bring-up after its latest disruption only: the records do not say when it became
   done, and an earlier bring-up was one (so a closed day stays as kept: kept.py).
3. The sub-phase is what the records say at that instant: the lost node still alive in our
   records (detection: from the cloud's own time of the loss, where it says, to when the
   daemon marked it dead), a node READY (setup), a node asked for or creating (provisioning),
   a dead node being deleted (delete), no node and the last create failed for capacity or
   quota (capacity_wait).

The boundaries are every timestamp of the records, so classifying each piece between two of
them by its start is exact: the pieces tile [start, now] with no gap and no overlap, and
neighbours with the same label are merged. Pure: `now` is an argument.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import pairwise

from tpucared.core.ledger.categories import (
    Category,
    Interval,
    NodeTimes,
    Phase,
    SlotHistory,
)
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import (
    AttemptOutcome,
    CreateAttemptRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import ErrorKind

_CAPACITY_OUTCOMES = frozenset({ErrorKind.CAPACITY.value, ErrorKind.QUOTA.value})


@dataclass(frozen=True)
class _Context:
    """What the latest disruption makes of the time after it."""

    category: Category
    cause: LossCause | None = None
    lost: NodeTimes | None = None  # the node whose loss it is
    bring_up: bool = False  # no loss: bringing a node up (startup, or capacity_wait)


_STARTUP = _Context(Category.STARTUP, bring_up=True)


def loss_category(cause: LossCause | None) -> Category:
    """The category of the time a loss costs, by its cause (None: unknown, or ours)."""
    if cause is LossCause.MAINTENANCE:
        return Category.MAINTENANCE
    if cause is LossCause.BAD_HOST:
        return Category.BAD_HOST
    if cause is LossCause.CRASH:
        return Category.CRASH_RESTART
    return Category.RECOVERY


def slot_ledger(history: SlotHistory, now: datetime) -> list[Interval]:
    """The slot's intervals from its first create to `now`, in time order (none before
    its first create, or when that is not before `now`)."""
    start = history.first
    if start is None or start >= now:
        return []
    nodes = sorted(history.nodes, key=lambda n: (n.requested_at, n.id))
    by_id = {n.id: n for n in nodes}
    spans = _productive(history, nodes, by_id, now)
    events = _disruptions(history, by_id, spans, now)
    times = [t for t, _ in events]
    creates = sorted(history.creates, key=lambda c: c.started_at)
    create_times = [c.started_at for c in creates]
    bounds = _bounds(start, now, nodes, history, spans, times)
    out: list[Interval] = []
    # The nodes and spans alive at t0, kept as the sweep goes: a long history is scanned
    # once, not once per piece.
    live_nodes: list[NodeTimes] = []
    live_spans: list[_Span] = []
    next_node = next_span = 0
    for t0, t1 in pairwise(bounds):
        while next_node < len(nodes) and nodes[next_node].requested_at <= t0:
            live_nodes.append(nodes[next_node])
            next_node += 1
        while next_span < len(spans) and spans[next_span][0] <= t0:
            live_spans.append(spans[next_span])
            next_span += 1
        live_nodes = [n for n in live_nodes if n.gone_at is None or t0 < n.gone_at]
        live_spans = [sp for sp in live_spans if t0 < sp[1]]
        if live_spans:
            _, _, node, (category, cause, steps) = live_spans[0]
            piece = Interval(
                t0,
                t1,
                category,
                cause=cause,
                zone=node.zone if node else None,
                node=node.node_name if node else None,
                accelerator_type=node.accelerator_type if node else None,
                steps=steps,
            )
        else:
            at = bisect_right(times, t0)
            context = events[at - 1][1] if at else _STARTUP
            latest = bisect_right(create_times, t0)
            last_create = creates[latest - 1] if latest else None
            piece = _classify(t0, t1, context, live_nodes, last_create)
            # Done (or its fleet down) idles the bring-up after the latest disruption only:
            # an earlier bring-up was one, and stays one once its day is kept (kept.py).
            latest = at == len(events)
            if piece.category is not Category.HELD and history.done and context.bring_up and latest:
                piece = Interval(t0, t1, Category.IDLE)
        out.append(piece)
    return merged(out)


# An attempt's time: [start, end), its node, and (category, cause, steps lost).
_Span = tuple[datetime, datetime, NodeTimes | None, tuple[Category, LossCause | None, int | None]]
_RUNNING = (Category.PRODUCTIVE, None, None)


def _productive(
    history: SlotHistory, nodes: Sequence[NodeTimes], by_id: dict[int, NodeTimes], now: datetime
) -> list[_Span]:
    """The attempts' time (no workload: the nodes' READY time), productive or, with a
    progress file, split into startup, productive and wasted (the module's docstring)."""
    spans: list[_Span] = []
    if history.workload:
        for attempt in history.attempts:
            begin = attempt.started_at
            end = attempt.ended_at or now
            cut_by = None
            # Cut at the loss of a node it ran on: the cloud's time, not when we noticed.
            for n in nodes:
                lost = n.lost_at
                if n.requested_at <= begin and lost is not None and begin < lost < end:
                    end, cut_by = lost, n
            node = by_id.get(attempt.incarnation_id)
            spans += _attempt_spans(attempt, begin, min(end, now), node, cut_by)
    else:
        for n in nodes:
            if n.ready_at is not None:
                spans.append((n.ready_at, min(n.usable_until() or now, now), n, _RUNNING))
    return sorted((s for s in spans if s[0] < s[1]), key=lambda s: s[0])


def _attempt_spans(
    attempt: WorkloadAttemptRecord,
    begin: datetime,
    end: datetime,
    node: NodeTimes | None,
    cut_by: NodeTimes | None,
) -> list[_Span]:
    if attempt.first_step_at is None or end <= begin:
        return [(begin, end, node, _RUNNING)]  # no progress told: productive whole
    first = min(max(attempt.first_step_at, begin), end)
    loss: _Context | None = None
    if cut_by is not None:
        loss = _Context(loss_category(cut_by.loss_cause), cut_by.loss_cause, cut_by)
    elif attempt.ended_at is not None:
        ending = _ending(attempt, node)
        loss = None if ending.bring_up or ending.category is Category.HELD else ending
    spans: list[_Span] = [(begin, first, node, (Category.PROGRAM_STARTUP, None, None))]
    if loss is None:
        return [*spans, (first, end, node, _RUNNING)]
    kept = first
    if attempt.last_checkpoint_at is not None:
        kept = min(max(attempt.last_checkpoint_at, first), end)
    steps = None
    if attempt.last_step is not None and attempt.last_checkpoint is not None:
        steps = max(attempt.last_step - attempt.last_checkpoint, 0)
    wasted = (Category.WASTED, loss.cause, steps)
    return [*spans, (first, kept, node, _RUNNING), (kept, end, node, wasted)]


def _ending(attempt: WorkloadAttemptRecord, node: NodeTimes | None) -> _Context:
    """What an ended attempt's end makes of the time after it."""
    lost = node.lost_at if node is not None else None
    outcome = attempt.outcome
    if outcome in (AttemptOutcome.FAILED, AttemptOutcome.HUNG):
        return _Context(Category.CRASH_RESTART, LossCause.CRASH)
    if node is not None and (
        outcome is AttemptOutcome.PREEMPTED or (lost is not None and lost >= attempt.started_at)
    ):
        return _Context(loss_category(node.loss_cause), node.loss_cause, node)
    if outcome is AttemptOutcome.PREEMPTED:
        return _Context(Category.RECOVERY)
    return _Context(Category.IDLE, bring_up=True)  # succeeded, or cancelled by us


def _disruptions(
    history: SlotHistory, by_id: dict[int, NodeTimes], spans: Sequence[_Span], now: datetime
) -> list[tuple[datetime, _Context]]:
    """Every disruption, in time order; at a tie the later in this list wins (a node's loss
    over an attempt's end, a hold over both)."""
    events: list[tuple[int, datetime, _Context]] = []
    last_end: tuple[datetime, AttemptOutcome | None] | None = None
    for attempt in history.attempts:
        if attempt.ended_at is None:
            continue
        node = by_id.get(attempt.incarnation_id)
        end = attempt.ended_at
        lost = node.lost_at if node is not None else None
        if lost is not None and attempt.started_at < lost:
            end = min(end, lost)
        outcome = attempt.outcome
        events.append((0, end, _ending(attempt, node)))
        if last_end is None or end >= last_end[0]:
            last_end = (end, outcome)
    for node in by_id.values():
        lost = node.lost_at
        if lost is not None:
            events.append(
                (1, lost, _Context(loss_category(node.loss_cause), node.loss_cause, node))
            )
    if (
        history.done
        and last_end is not None
        and last_end[1]
        not in (
            AttemptOutcome.SUCCEEDED,
            AttemptOutcome.CANCELLED,
        )
    ):
        # Done after a failure: the slot's failure budget is spent, it holds.
        events.append((2, last_end[0], _Context(Category.HELD)))
    if history.held_since is not None:
        events.append((2, history.held_since, _Context(Category.HELD)))
    events.sort(key=lambda e: (e[1], e[0]))
    return [(t, c) for _, t, c in events if t <= now]


def _bounds(
    start: datetime,
    now: datetime,
    nodes: Iterable[NodeTimes],
    history: SlotHistory,
    spans: Iterable[_Span],
    events: Iterable[datetime],
) -> list[datetime]:
    points: set[datetime] = {start, now, *events}
    for n in nodes:
        points.update(
            t
            for t in (
                n.requested_at,
                n.creating_at,
                n.ready_at,
                n.dead_at,
                n.lost_at,
                n.deleting_at,
                n.deleted_at,
                n.failed_at,
            )
            if t is not None
        )
    for s, e, _, _ in spans:
        points.update((s, e))
    points.update(c.started_at for c in history.creates)
    return sorted(p for p in points if start <= p <= now)


def _classify(
    t0: datetime,
    t1: datetime,
    context: _Context,
    nodes: Sequence[NodeTimes],
    last_create: CreateAttemptRecord | None,
) -> Interval:
    if context.category is Category.HELD:
        return Interval(t0, t1, Category.HELD)
    phase, node = _stage(t0, context.lost, nodes, last_create)
    zone = node.zone if node is not None else (last_create.zone if last_create else None)
    category = context.category
    if context.bring_up:
        if category is Category.IDLE and phase in (Phase.DETECTION, Phase.DELETE, None):
            return Interval(t0, t1, Category.IDLE)  # no node is the point: none is wanted
        category = Category.CAPACITY_WAIT if phase is Phase.CAPACITY_WAIT else Category.STARTUP
        if category is Category.CAPACITY_WAIT:
            phase = None
    return Interval(
        t0,
        t1,
        category,
        phase,
        context.cause,
        zone,
        _name(node),
        node.accelerator_type if node else (last_create.accelerator_type if last_create else None),
    )


def _name(node: NodeTimes | None) -> str | None:
    return node.node_name if node is not None else None


def _stage(
    at: datetime,
    lost: NodeTimes | None,
    nodes: Sequence[NodeTimes],
    last_create: CreateAttemptRecord | None,
) -> tuple[Phase | None, NodeTimes | None]:
    if lost is not None:
        dead = lost.dead_at or lost.deleting_at or lost.gone_at
        if dead is None or at < dead:
            return Phase.DETECTION, lost
    ready = creating = dying = None
    for n in nodes:
        if n.failed_at is not None or n.requested_at > at:
            continue  # a create that failed never was a node: its time is the wait's
        if n.gone_at is not None and at >= n.gone_at:
            continue
        usable_until = n.usable_until()
        if usable_until is not None and at >= usable_until:
            dying = n
        elif n is lost:
            continue
        elif n.ready_at is not None and n.ready_at <= at:
            ready = n
        else:
            creating = n
    if ready is not None:
        return Phase.SETUP, ready
    if creating is not None:
        return Phase.PROVISIONING, creating
    if dying is not None:
        return Phase.DELETE, dying
    if last_create is not None and last_create.outcome in _CAPACITY_OUTCOMES:
        return Phase.CAPACITY_WAIT, None
    return (Phase.PROVISIONING if last_create is not None else None), None


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """Neighbours with the same label as one interval."""
    out: list[Interval] = []
    for piece in intervals:
        if out and out[-1].end == piece.start and _label(out[-1]) == _label(piece):
            out[-1] = Interval(out[-1].start, piece.end, *_label(piece))
        else:
            out.append(piece)
    return out


def _label(
    i: Interval,
) -> tuple[
    Category, Phase | None, LossCause | None, str | None, str | None, str | None, int | None
]:
    return (i.category, i.phase, i.cause, i.zone, i.node, i.accelerator_type, i.steps)


def clipped(
    intervals: Iterable[Interval], since: datetime, *, keep_steps: bool = True
) -> list[Interval]:
    """The part at or after `since` (`--since`). Without `keep_steps` (the tail after the
    kept days, kept.py), an interval cut keeps no steps: its first day counted them."""
    out = []
    for i in intervals:
        if i.end <= since:
            continue
        if i.start < since:
            i = Interval(since, i.end, *_label(i))
            if not keep_steps:
                i = replace(i, steps=None)
        out.append(i)
    return out
