"""Probe scheduling (core/workload/probes.py): which slots to probe when, which answers reach
the planner, which chains to keep; and the plan narrowing of `tpucared down`
(core/vocab/plan.py: `Plan.without_notices_outside`).

One slot, "sweep"/0, its READY node 7 with attempt 3 running, unless a row says otherwise.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tpucared.core.model.records import (
    AttemptOutcome,
    IncarnationRecord,
    NodePhase,
    WorkloadAttemptRecord,
)
from tpucared.core.vocab.actions import (
    Action,
    DeleteNode,
    Notice,
    OpenSlot,
    Severity,
    Transition,
)
from tpucared.core.vocab.plan import Plan
from tpucared.core.vocab.snapshot import SlotKey
from tpucared.core.workload.actions import FinishAttempt, LaunchWorkload, StopWorkload
from tpucared.core.workload.gang import by_slot, slot_node
from tpucared.core.workload.inputs import SlotProbe, WorkloadSnapshot
from tpucared.core.workload.probes import (
    DUE_SHARE,
    Probed,
    became_ready,
    first_probe,
    going_away,
    is_idle,
    is_news,
    is_reachable,
    keep_chain,
    leaving,
    node_of,
    probe_due,
    probe_interval,
    stale_probe,
)

from ..core_support import FLEET, T0, Z1
from .workload_support import NODE_ID, attempt, node, probe, slot

P = NodePhase
KEY: SlotKey = (FLEET, 0)
INTERVAL = 30.0
OTHER = 8  # another incarnation


def transition(new: NodePhase, inc: int = NODE_ID, expected: NodePhase = P.READY) -> Transition:
    return Transition(incarnation_id=inc, node_name=f"n{inc}", expected=expected, new=new,
                      reason="t")  # fmt: skip


def delete(inc: int = NODE_ID, expected: NodePhase = P.READY) -> DeleteNode:
    return DeleteNode(incarnation_id=inc, fleet=FLEET, slot=0, node_name=f"n{inc}", zone=Z1,
                      expected=expected, queued_resource=None, reason="d")  # fmt: skip


def launch(inc: int = NODE_ID) -> LaunchWorkload:
    return LaunchWorkload(fleet=FLEET, slot=0, incarnation_id=inc, node_name=f"n{inc}",
                          attempt=4, reason="l")  # fmt: skip


def stop(inc: int = NODE_ID) -> StopWorkload:
    return StopWorkload(fleet=FLEET, slot=0, incarnation_id=inc, node_name=f"n{inc}",
                        attempt=3, reason="s")  # fmt: skip


def finish() -> FinishAttempt:
    return FinishAttempt(fleet=FLEET, slot=0, attempt_id=103, attempt=3,
                         outcome=AttemptOutcome.FAILED, reason="f")  # fmt: skip


def notice(fleet: str | None, key: str = "k") -> Notice:
    return Notice(key=f"{key}/{fleet}", severity=Severity.WARNING, fleet=fleet, reason="n")


RUNNING = attempt()  # attempt 3, running on node 7


def snap(
    inc: IncarnationRecord | None = None,
    *,
    last: WorkloadAttemptRecord | None = RUNNING,
    done: bool = False,
) -> WorkloadSnapshot:
    """The slot with node `inc` (default: READY node 7) and newest attempt `last` (None: no
    attempt yet)."""
    return WorkloadSnapshot.build(
        slots=[slot(done=done)],
        incarnations=[inc if inc is not None else node()],
        attempts=[last] if last is not None else [],
    )


# ---------------------------------------------------------------------------------------------
# What a plan does to the nodes jobs run on


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ([], set()),
        ([transition(P.READY, expected=P.CREATING)], set()),  # coming, not going
        ([transition(P.DEAD)], {NODE_ID}),
        ([transition(P.DELETED, expected=P.DELETING)], {NODE_ID}),
        ([delete()], {NODE_ID}),
        ([delete(OTHER, expected=P.DEAD), transition(P.READY)], {OTHER}),
        ([launch(), stop(), finish(), OpenSlot(fleet=FLEET, slot=1, reason="o")], set()),
    ],
    ids=["nothing", "ready", "dies", "deleted", "deleted-by-us", "other-node", "no-node-action"],
)
def test_leaving(actions: list[Action], expected: set[int]) -> None:
    assert leaving(actions) == expected


@pytest.mark.parametrize(
    ("inc", "away", "live", "cancel"),
    [
        (NODE_ID, set(), {NODE_ID}, False),
        (NODE_ID, {NODE_ID}, {NODE_ID}, True),  # this plan takes it away
        (NODE_ID, set(), {OTHER}, True),  # gone from the snapshot
        (NODE_ID, {OTHER}, {NODE_ID, OTHER}, False),  # another node goes
    ],
    ids=["stays", "taken-away", "gone", "other-goes"],
)
def test_going_away(inc: int, away: set[int], live: set[int], cancel: bool) -> None:
    assert going_away(inc, away, live) is cancel


@pytest.mark.parametrize(
    ("action", "inc"),
    [(launch(), NODE_ID), (stop(OTHER), OTHER), (finish(), None), (delete(), None)],
    ids=["launch", "stop", "finish", "delete"],
)
def test_node_of(action: Action, inc: int | None) -> None:
    assert node_of(action) == inc


@pytest.mark.parametrize(
    ("chain", "away", "kept"),
    [
        ([finish(), stop(), launch()], set(), [finish(), stop(), launch()]),
        ([finish(), stop(), launch()], {NODE_ID}, [finish()]),  # records outlive the node
        ([finish(), launch()], {OTHER}, [finish(), launch()]),
        ([stop(), launch()], {NODE_ID}, []),
    ],
    ids=["all-kept", "node-leaves", "other-node-leaves", "nothing-left"],
)
def test_keep_chain(chain: list[Action], away: set[int], kept: list[Action]) -> None:
    assert keep_chain(chain, away) == kept


@pytest.mark.parametrize(
    ("actions", "ready"),
    [
        ([transition(P.READY, expected=P.CREATING)], [NODE_ID]),
        ([transition(P.READY, OTHER, P.REQUESTED), transition(P.READY)], [OTHER, NODE_ID]),
        ([transition(P.READY, expected=P.CREATING), delete()], []),  # and away again
        ([transition(P.DEAD), delete(OTHER)], []),
        ([], []),
    ],
    ids=["one", "plan-order", "deleted-too", "none-ready", "empty"],
)
def test_became_ready(actions: list[Action], ready: list[int]) -> None:
    assert became_ready(actions) == ready


# ---------------------------------------------------------------------------------------------
# Which slots to probe when

NOW = 1000.0
RECENT = Probed(NODE_ID, epoch=2, started=NOW - 1.0, reachable=True)


@pytest.mark.parametrize(
    ("last", "slot_epoch", "snapshot", "now", "due"),
    [
        (None, 2, snap(), NOW, True),  # never probed
        (replace(RECENT, incarnation_id=OTHER), 2, snap(), NOW, True),  # a fresh node
        (RECENT, 3, snap(), NOW, True),  # its workload actions ran since
        (RECENT, 2, snap(last=None), NOW, True),  # nothing ran yet: a launch waits
        (RECENT, 2, snap(last=attempt(outcome=AttemptOutcome.FAILED)), NOW, True),
        (RECENT, 2, snap(last=attempt(2)), NOW, True),  # the newest is not the one probed
        (RECENT, 2, snap(last=None, done=True), NOW, False),  # done: nothing to launch
        (RECENT, 2, snap(), NOW, False),  # running, probed a second ago
        (RECENT, 2, snap(), RECENT.started + DUE_SHARE * INTERVAL - 0.01, False),
        (RECENT, 2, snap(), RECENT.started + DUE_SHARE * INTERVAL, True),  # once per poll
    ],
    ids=[
        "never", "new-node", "after-chain", "idle", "ended", "other-attempt", "done",
        "too-soon", "just-before", "due",
    ],
)  # fmt: skip
def test_probe_due(
    last: Probed | None, slot_epoch: int, snapshot: WorkloadSnapshot, now: float, due: bool
) -> None:
    got = probe_due(
        KEY,
        last,
        incarnation_id=NODE_ID,
        attempt=3,
        slot_epoch=slot_epoch,
        snapshot=snapshot,
        now=now,
        interval=INTERVAL,
    )
    assert got is due


@pytest.mark.parametrize(
    ("poll", "workers", "rate", "interval"),
    [
        (10.0, 0, 200.0, 10.0),  # nothing to probe
        (10.0, 1000, 200.0, 10.0),  # 100 worker probes a second: within the rate
        (10.0, 2000, 200.0, 10.0),  # exactly the rate
        (10.0, 4000, 200.0, 20.0),  # 1,000 slices x 4 workers: every 20 s
        (2.0, 4000, 200.0, 20.0),  # a faster poll does not make probes faster past the rate
        (10.0, 40000, 200.0, 200.0),  # ten times the fleet, ten times the interval
        (1.0, 10, 1e9, 1.0),
    ],
)
def test_probe_interval_grows_with_the_fleet_only_past_the_rate(
    poll: float, workers: int, rate: float, interval: float
) -> None:
    got = probe_interval(poll, workers, rate)
    assert got == pytest.approx(interval)
    # The probes' cost per second: never above the rate once the interval has grown.
    assert workers / got <= rate + 1e-9 or got == poll


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_probe_interval_needs_a_positive_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="probe rate"):
        probe_interval(10.0, 10, rate)


@pytest.mark.parametrize(
    ("previous", "inc", "first"),
    [
        (None, NODE_ID, True),
        (RECENT, NODE_ID, False),
        (replace(RECENT, incarnation_id=OTHER), NODE_ID, True),
        (replace(RECENT, reachable=False), NODE_ID, True),  # its sshd was not up yet
    ],
    ids=["none", "known", "other-node", "unreachable-last-time"],
)
def test_first_probe(previous: Probed | None, inc: int, first: bool) -> None:
    assert first_probe(previous, inc) is first


# ---------------------------------------------------------------------------------------------
# Which probe answers count


@pytest.mark.parametrize(
    ("snapshot", "probed", "probe_epoch", "why"),
    [
        (snap(), probe(), 2, None),
        (snap(node(id=OTHER), last=None), probe(), 2, "another node now"),
        (WorkloadSnapshot.build(slots=[slot()]), probe(), 2, "another node now"),
        (snap(node(P.DEAD)), probe(), 2, "node dead"),
        (snap(), probe(), 1, "taken before the slot's last workload actions"),
        (snap(last=attempt(4)), probe(), 2, "probed attempt 3, newest is 4"),
        (snap(last=None), probe(), 2, "probed attempt 3, newest is None"),
        (snap(last=None), probe(attempt=None), 2, None),  # no attempt yet, none probed
        # The newest attempt ran on an earlier node: on this one there is none yet.
        (snap(last=attempt(node_id=OTHER)), probe(attempt=None), 2, None),
    ],
    ids=[
        "valid", "other-node", "no-node", "not-ready", "before-chain", "newer-attempt",
        "attempt-gone", "no-attempt", "attempt-elsewhere",
    ],
)  # fmt: skip
def test_stale_probe(
    snapshot: WorkloadSnapshot, probed: SlotProbe, probe_epoch: int, why: str | None
) -> None:
    node = slot_node(by_slot(snapshot.nodes.values()).get(KEY, []))
    assert stale_probe(KEY, probed, probe_epoch, 2, snapshot, node) == why


@pytest.mark.parametrize(
    ("before", "fresh", "news"),
    [
        (None, probe(), True),  # the slot's first answer on its node
        (probe(), probe(), False),
        (probe(), probe(since=T0), False),  # only `since` differs: not news
        (probe(), probe("run", "run", "run", "exit1"), True),
        (probe("exit1"), probe("exit2"), True),  # another exit code
        (probe("died"), probe("rebooted"), True),  # another why
        (probe(), probe(attempt=4), True),
        (probe(), probe(node_id=OTHER), True),
        (probe(), probe(busy=(1,)), True),
        (probe(), probe(blocked="secret X missing"), True),
    ],
    ids=[
        "first", "same", "same-answers", "state", "exit-code", "detail", "attempt", "node",
        "busy", "blocked",
    ],
)  # fmt: skip
def test_is_news(before: SlotProbe | None, fresh: SlotProbe, news: bool) -> None:
    assert is_news(before, fresh) is news


@pytest.mark.parametrize(
    ("probed", "idle", "reachable"),
    [
        (probe(), False, True),
        (probe("run", "down", "down", "down"), False, True),
        (probe("ok", "exit1", "norun", "down"), True, True),
        (probe("down", "down", "down", "down"), True, False),
        (probe("run", "run", "run", "run", attempt=None), True, True),  # nothing launched
    ],
    ids=["running", "one-answers", "ended", "all-unreachable", "no-attempt"],
)
def test_is_idle_and_is_reachable(probed: SlotProbe, idle: bool, reachable: bool) -> None:
    assert is_idle(probed) is idle
    assert is_reachable(probed) is reachable


# ---------------------------------------------------------------------------------------------
# `tpucared down` over some fleets: notices about the others are dropped


@pytest.mark.parametrize(
    ("fleets", "kept"),
    [
        ((FLEET,), ["delete", "launch", "sweep", "None"]),
        ((FLEET, "eval"), ["delete", "launch", "sweep", "eval", "None"]),
        ((), ["delete", "launch", "None"]),  # every other action is kept all the same
    ],
    ids=["one-fleet", "two-fleets", "no-fleet"],
)
def test_plan_without_notices_outside(fleets: tuple[str, ...], kept: list[str]) -> None:
    actions = (delete(), launch(), notice(FLEET), notice("eval"), notice("other"), notice(None))
    plan = Plan(now=T0, actions=actions, standing=frozenset({"k"}))
    narrowed = plan.without_notices_outside(fleets)
    labels = [str(a.fleet) if isinstance(a, Notice) else a.kind for a in narrowed.actions]
    assert labels == kept
    assert (narrowed.now, narrowed.holds, narrowed.standing) == (T0, (), frozenset({"k"}))
    assert plan.actions == actions  # the plan itself is left as it was
