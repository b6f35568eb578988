"""Properties of the workload sub-planner over random slots and random histories (hypothesis).

One tick: any slot (spec, counters, node and its phase after the node plan, newest attempt,
this tick's probe of any mix of worker states and timers) must give a plan that
- never launches on a node that is not READY, before and after the node actions;
- never starts a second running attempt, and numbers a new one slot.attempts + 1;
- finishes only the running attempt, at most once, and resumes only that one;
- stops every worker (or relaunches with cleanup) whenever one worker's run ended while
  others may still run on a READY node;
- never launches a new attempt past the crash budget, or after a failure with restart = never;
- only replaces (deletes) a node that stays READY;
- is deterministic.

Many ticks: a slot replayed through random worker fates, preemptions and replacements, with
the actions applied as the runner and store would (workload_support.Sim), keeps attempt
numbers strictly increasing, one running attempt at most, and its failures within budget.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpucared.core.model.records import (
    AttemptOutcome,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import RestartPolicy, WorkloadSpec
from tpucared.core.vocab.actions import DeleteNode
from tpucared.core.workload.actions import (
    CHARGED_OUTCOMES,
    FinishAttempt,
    LaunchWorkload,
    StopWorkload,
)
from tpucared.core.workload.inputs import (
    DIED,
    NEVER_STARTED,
    REBOOTED,
    SlotProbe,
    WorkerProbe,
    WorkerState,
)
from tpucared.core.workload.planner import SlotWork, plan_slot

from ..core_support import T0
from .workload_support import NODE_ID, POLICY, WORKERS, Sim, node

P = NodePhase
S = WorkerState
T = TypeVar("T")
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

past = st.integers(min_value=0, max_value=30 * 60).map(lambda s: T0 - timedelta(seconds=s))
specs = st.builds(
    WorkloadSpec,
    run=st.just("python3 train.py"),
    restart=st.sampled_from(list(RestartPolicy)),
    max_failures=st.integers(0, 3),
    hang_timeout=st.sampled_from([None, 60.0, 600.0]),
)


@st.composite
def worker_probes(draw: st.DrawFn, index: int) -> WorkerProbe:
    kinds = ["run", "run", "run", "exit", "exit", "norun", "died", "rebooted", "down"]
    kind = draw(st.sampled_from(kinds))
    if kind == "run":
        p = WorkerProbe.running(index, draw(st.integers(0, 3)))
    elif kind == "exit":
        p = WorkerProbe.exited(index, draw(st.sampled_from([0, 0, 1, 137])))
    elif kind == "down":
        p = WorkerProbe.unreachable(index, "refused")
    else:
        p = WorkerProbe.gone(index, {"norun": NEVER_STARTED, "died": DIED}.get(kind, REBOOTED))
    return replace(p, since=draw(past), log_since=draw(past))


def usually(value: object, *others: object) -> st.SearchStrategy[object]:
    """`value` three times out of four: random worlds are mostly the common case, so the
    interesting rules (launches, partial exits) are reached often."""
    return st.sampled_from([value, value, value, *others]) if others else st.just(value)


@st.composite
def slot_works(draw: st.DrawFn) -> SlotWork:
    """Half the worlds are the common case (a READY node that stays READY, the slot wanted,
    a workload, the probe of the newest attempt): random worlds alone rarely reach launches
    and partial exits. The other half vary everything."""
    common = draw(st.booleans())

    def pick(value: T, *others: T) -> T:
        return value if common else draw(st.sampled_from([value, *others]))

    attempts = draw(st.integers(0, 5))
    failures = draw(st.integers(0, attempts))
    slot = SlotRecord(fleet="sweep", index=0, run_id="r", attempts=attempts, failures=failures,
                      done=bool(pick(False, True)))  # fmt: skip
    phases = [p for p in P if p is not P.READY]
    inc: IncarnationRecord | None = pick(
        node(P.READY), None, node(id=NODE_ID + 1), *(node(p) for p in phases)
    )
    phase_after = inc.phase if inc is not None else None
    if inc is not None and not common and draw(st.booleans()):
        phase_after = draw(st.sampled_from(list(P)))
    last = None
    if attempts:
        started = draw(past)
        outcome = draw(st.sampled_from([None, *AttemptOutcome]))
        last = WorkloadAttemptRecord(
            id=50, fleet="sweep", slot=0, incarnation_id=pick(NODE_ID, 3),
            number=attempts, started_at=started, outcome=outcome,
            ended_at=None if outcome is None else max(started, draw(past)),
        )  # fmt: skip
    probe = None
    if inc is not None and pick(True, False):
        n = draw(st.sampled_from([WORKERS, 1, 2])) if not common else WORKERS
        probe = SlotProbe(
            fleet="sweep", slot=0, incarnation_id=inc.id,
            attempt=draw(st.sampled_from([attempts or None, None, attempts + 1]))
            if not common else (attempts or None),
            observed_at=T0,
            workers=tuple(draw(worker_probes(i)) for i in range(n)),
            busy=draw(st.sampled_from([(), (), (1,)])),
            blocked=draw(st.sampled_from([None, None, "a secret is missing"])),
        )  # fmt: skip
    spec = draw(specs) if common else draw(st.none() | specs)
    return SlotWork(
        fleet="sweep",
        index=0,
        spec=spec,
        slot=slot if common else draw(st.sampled_from([slot, None])),
        node=inc,
        phase_after=phase_after,
        workers=WORKERS if inc is not None else 0,
        last=last,
        probe=probe,
        unwanted=None if common else draw(st.sampled_from([None, "scaled down"])),
        now=T0,
    )


@SETTINGS
@given(slot_works())
def test_one_tick_keeps_every_invariant(w: SlotWork) -> None:
    plan = plan_slot(w, POLICY)
    assert plan == plan_slot(w, POLICY)  # deterministic
    acts = plan.actions
    running = w.last if w.last is not None and w.last.ended_at is None else None
    finishes = [a for a in acts if isinstance(a, FinishAttempt)]
    launches = [a for a in acts if isinstance(a, LaunchWorkload)]
    assert len(finishes) <= 1
    assert len(launches) <= 1
    for f in finishes:
        assert running is not None
        assert f.attempt_id == running.id
        assert f.attempt == running.number
    for launch in launches:
        assert w.node is not None
        assert launch.incarnation_id == w.node.id
        assert w.node.phase is P.READY
        assert w.phase_after is P.READY
        if launch.attempt_id is None:
            # A new attempt: none runs once this plan's finishes are applied.
            assert running is None or finishes
            assert w.slot is not None
            assert launch.attempt == w.slot.attempts + 1
            assert w.last is None or launch.attempt > w.last.number
            assert w.spec is not None
            assert not w.slot.done
            assert w.unwanted is None
            ended = finishes[0].outcome if finishes else (w.last.outcome if w.last else None)
            if ended in CHARGED_OUTCOMES:
                charged = w.slot.failures + (1 if finishes else 0)
                assert w.spec.restart is not RestartPolicy.NEVER
                assert charged <= w.spec.max_failures
        else:
            assert running is not None
            assert launch.attempt_id == running.id
            assert not finishes
    for d in (a for a in acts if isinstance(a, DeleteNode)):
        assert w.node is not None
        assert d.incarnation_id == w.node.id
        assert d.expected is P.READY
        assert w.phase_after is P.READY
    if running is not None and w.probe is not None and _partial_exit(w):
        (f,) = finishes
        assert f.outcome is AttemptOutcome.FAILED
        stops = [a for a in acts if isinstance(a, StopWorkload) and a.attempt == running.number]
        cleans = [a for a in launches if a.clean_after == running.number]
        assert stops or cleans, acts


def _partial_exit(w: SlotWork) -> bool:
    """A worker's run ended badly on a READY node while another worker still runs it."""
    assert w.probe is not None
    assert w.last is not None
    assert w.node is not None
    if (w.node.id, w.phase_after) != (w.last.incarnation_id, P.READY) or w.spec is None:
        return False
    if w.unwanted is not None or w.probe.attempt != w.last.number:
        return False
    if w.probe.incarnation_id != w.last.incarnation_id:
        return False
    states = [(p.state, p.exit_code, p.detail) for p in w.probe.workers]
    ended = any(
        (s is S.EXITED and code != 0) or (s is S.GONE and detail == DIED)
        for s, code, detail in states
    )
    rebooted = any(s is S.GONE and detail == REBOOTED for s, _, detail in states)
    return ended and not rebooted and any(s is S.RUNNING for s, _, _ in states)


# ---------------------------------------------------------------------------------------------
# Many ticks

FATES = ["run", "run", "run", "ok", "fail", "kill", "down", "preempt", "reboot", "wait"]


@SETTINGS
@given(specs, st.lists(st.tuples(st.sampled_from(FATES), st.integers(0, WORKERS - 1)),
                       min_size=1, max_size=40))  # fmt: skip
def test_a_slot_over_many_ticks(spec: WorkloadSpec, fates: list[tuple[str, int]]) -> None:
    sim = Sim(spec)
    now = T0
    next_node = NODE_ID
    # Each worker's run of the current attempt: what the probe will say.
    state: dict[int, WorkerProbe] = {}
    for fate, worker in fates:
        now += timedelta(seconds=97)  # every tick jumps: backoffs and graces get crossed
        running = sim.running[0] if sim.running else None
        if sim.node is None and not sim.slot.done:
            next_node += 1
            sim.node = node(id=next_node)  # the node planner recreated it
            state = {}
        phase_after = P.READY if sim.node is not None else None
        if running is not None and sim.node is not None:
            if not state:
                state = {i: WorkerProbe.running(i, 0) for i in range(WORKERS)}
            if fate == "ok":
                state = {i: WorkerProbe.exited(i, 0) for i in range(WORKERS)}
            elif fate == "fail":
                state[worker] = WorkerProbe.exited(worker, 1)
            elif fate == "kill":
                state[worker] = WorkerProbe.gone(worker, DIED)
            elif fate == "reboot":
                state[worker] = WorkerProbe.gone(worker, REBOOTED)
            elif fate == "down":
                state[worker] = WorkerProbe.unreachable(worker, "timeout")
            elif fate == "run":
                w = state[worker]
                if w.state is S.RUNNING:
                    state[worker] = WorkerProbe.running(worker, (w.log_bytes or 0) + 1)
            elif fate == "preempt":
                phase_after = P.DEAD
        elif sim.node is not None:
            state = {}
        probe = None
        if sim.node is not None:
            number = running.number if running is not None else None
            workers = tuple(
                replace(state.get(i) or WorkerProbe.gone(i), since=now - timedelta(minutes=10),
                        log_since=now - timedelta(minutes=10))
                for i in range(WORKERS)
            )  # fmt: skip
            probe = SlotProbe("sweep", 0, sim.node.id, number, now, workers)
        acts = plan_slot(sim.work(probe, now, phase_after), POLICY).actions
        before = sim.slot.attempts
        sim.apply(acts, now)
        if phase_after is P.DEAD:
            sim.node = None  # the node planner deletes it; a new one comes next tick
        if sim.slot.attempts != before:
            state = {}  # a new attempt starts with fresh runs
        assert len(sim.running) <= 1
        numbers = [a.number for a in sim.attempts]
        assert numbers == sorted(set(numbers))  # strictly increasing
        charged = sum(a.outcome in CHARGED_OUTCOMES for a in sim.attempts)
        assert sim.slot.failures == charged
        # Never launched past the budget: the failures a launch saw stay within it.
        assert all(f <= spec.max_failures for _, f in sim.launches)
        if spec.restart is RestartPolicy.NEVER:
            assert all(f == 0 for _, f in sim.launches)
        if sim.slot.done:
            assert not sim.running
