"""Helpers (no tests) for the workload planner's tests: one slot of "sweep", 4 workers.

Defaults describe the common case: the slot's node (incarnation 7) is READY and stays READY,
attempt 3 runs on it since ten minutes, and this tick's probe is of that attempt. Tests
override what their row is about. `Sim` replays the planner's actions on in-memory records,
as the runner and store would, for multi-tick properties.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from tpucared.core.model.records import (
    AttemptOutcome,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.vocab.actions import Action, DeleteNode, Notice
from tpucared.core.workload.actions import (
    CHARGED_OUTCOMES,
    FinishAttempt,
    LaunchWorkload,
    MarkSlotDone,
    StopWorkload,
)
from tpucared.core.workload.inputs import SlotProbe, WorkerProbe
from tpucared.core.workload.planner import SlotPlan, SlotWork, WorkloadPolicy, plan_slot

from ..core_support import FLEET, T0, Z1

P = NodePhase
NODE_ID = 7
WORKERS = 4
POLICY = WorkloadPolicy()


def ago(**kw: float) -> datetime:
    return T0 - timedelta(**kw)


def node(phase: NodePhase = P.READY, id: int = NODE_ID) -> IncarnationRecord:
    return IncarnationRecord(
        id=id,
        fleet=FLEET,
        slot=0,
        node_name=f"{FLEET}-0",
        zone=Z1,
        accelerator_type="v4-32",
        phase=phase,
        phase_since=ago(hours=1),
        requested_at=ago(hours=1),
        ready_at=ago(hours=1),
    )


def slice_node(id: int, index: int, phase: NodePhase = P.READY) -> IncarnationRecord:
    """Slice `index` of a multislice slot (fleet "ms", v4-16 slices), incarnation `id`."""
    return IncarnationRecord(
        id=id, fleet="ms", slot=0, slice=index, node_name=f"ms-0-{index}", zone="z",
        accelerator_type="v4-16", phase=phase, phase_since=T0, requested_at=T0,
    )  # fmt: skip


def slot(attempts: int = 3, failures: int = 0, run_id: str = "sweep-0-r", **kw: Any) -> SlotRecord:
    return SlotRecord(fleet=FLEET, index=0, run_id=run_id, attempts=attempts,
                      failures=failures, **kw)  # fmt: skip


def attempt(
    number: int = 3,
    *,
    outcome: AttemptOutcome | None = None,
    node_id: int = NODE_ID,
    started: datetime | None = None,
    ended: datetime | None = None,
) -> WorkloadAttemptRecord:
    started = started or ago(minutes=10)
    if outcome is not None and ended is None:
        ended = ago(minutes=1)
    return WorkloadAttemptRecord(
        id=100 + number,
        fleet=FLEET,
        slot=0,
        incarnation_id=node_id,
        number=number,
        started_at=started,
        ended_at=ended,
        outcome=outcome,
    )


def w(state: str, worker: int, since: datetime | None = None, **kw: Any) -> WorkerProbe:
    """One worker from a short spelling: run, ok (exit 0), exit<N>, died, rebooted, norun,
    down (unreachable)."""
    if state == "run":
        p = WorkerProbe.running(worker, log_bytes=kw.pop("log_bytes", 100))
    elif state == "ok":
        p = WorkerProbe.exited(worker, 0)
    elif state.startswith("exit"):
        p = WorkerProbe.exited(worker, int(state[4:]))
    elif state in ("died", "rebooted"):
        p = WorkerProbe.gone(worker, state)
    elif state == "norun":
        p = WorkerProbe.gone(worker)
    elif state == "down":
        p = WorkerProbe.unreachable(worker, "refused: connection refused")
    else:
        raise ValueError(state)
    since = since or ago(seconds=5)
    return replace(p, since=since, log_since=kw.pop("log_since", since), **kw)


def probe(
    *states: str,
    attempt: int | None = 3,
    node_id: int = NODE_ID,
    since: datetime | None = None,
    **kw: Any,
) -> SlotProbe:
    states = states or ("run",) * WORKERS
    return SlotProbe(
        fleet=FLEET,
        slot=0,
        incarnation_id=node_id,
        attempt=attempt,
        observed_at=T0,
        workers=tuple(w(s, i, since) for i, s in enumerate(states)),
        **kw,
    )


_DEFAULT: Any = object()


def work(
    *,
    spec: WorkloadSpec | None = _DEFAULT,
    slot_: SlotRecord | None = _DEFAULT,
    node_: IncarnationRecord | None = _DEFAULT,
    phase_after: NodePhase | None = _DEFAULT,
    last: WorkloadAttemptRecord | None = _DEFAULT,
    probe_: SlotProbe | None = _DEFAULT,
    unwanted: str | None = None,
    workers: int = WORKERS,
    now: datetime = T0,
) -> SlotWork:
    n = node() if node_ is _DEFAULT else node_
    if phase_after is _DEFAULT:
        phase_after = n.phase if n is not None else None
    return SlotWork(
        fleet=FLEET,
        index=0,
        spec=WorkloadSpec(run="python3 train.py") if spec is _DEFAULT else spec,
        slot=slot() if slot_ is _DEFAULT else slot_,
        node=n,
        phase_after=phase_after,
        workers=workers,
        last=attempt() if last is _DEFAULT else last,
        probe=probe() if probe_ is _DEFAULT else probe_,
        unwanted=unwanted,
        now=now,
    )


def decide(w: SlotWork, policy: WorkloadPolicy = POLICY) -> SlotPlan:
    return plan_slot(w, policy)


def kinds(p: SlotPlan) -> list[str]:
    return [a.kind for a in p.actions]


def finish_of(p: SlotPlan) -> FinishAttempt | None:
    found = [a for a in p.actions if isinstance(a, FinishAttempt)]
    assert len(found) <= 1, found
    return found[0] if found else None


def launch_of(p: SlotPlan) -> LaunchWorkload | None:
    found = [a for a in p.actions if isinstance(a, LaunchWorkload)]
    assert len(found) <= 1, found
    return found[0] if found else None


def outcome_of(p: SlotPlan) -> str | None:
    f = finish_of(p)
    return f.outcome.value if f is not None else None


# ---------------------------------------------------------------------------------------------
# A slot replayed over ticks


@dataclass
class Sim:
    """The records of one slot as the runner and store keep them, with the planner's actions
    applied at each tick. `launches` collects (attempt, TPUCARED_FAILURES) of every launch."""

    spec: WorkloadSpec
    slot: SlotRecord = field(default_factory=lambda: slot(attempts=0))
    node: IncarnationRecord | None = field(default_factory=node)
    attempts: list[WorkloadAttemptRecord] = field(default_factory=list)
    launches: list[tuple[int, int]] = field(default_factory=list)
    stops: list[int] = field(default_factory=list)
    replaced: int = 0
    actions: list[Action] = field(default_factory=list)

    @property
    def last(self) -> WorkloadAttemptRecord | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def running(self) -> list[WorkloadAttemptRecord]:
        return [a for a in self.attempts if a.ended_at is None]

    def work(
        self, probe: SlotProbe | None, now: datetime, phase_after: NodePhase | None
    ) -> SlotWork:
        return SlotWork(
            fleet=FLEET,
            index=0,
            spec=self.spec,
            slot=self.slot,
            node=self.node,
            phase_after=phase_after,
            workers=WORKERS if self.node is not None else 0,
            last=self.last,
            probe=probe,
            unwanted="workload finished (on_success = delete)" if self.slot.done else None,
            now=now,
        )

    def apply(self, actions: Iterable[Action], now: datetime) -> None:
        for a in actions:
            self.actions.append(a)
            if isinstance(a, FinishAttempt):
                i = next(i for i, r in enumerate(self.attempts) if r.id == a.attempt_id)
                assert self.attempts[i].ended_at is None, "finished twice"
                self.attempts[i] = replace(self.attempts[i], ended_at=now, outcome=a.outcome)
                if a.outcome in CHARGED_OUTCOMES:
                    self.slot = replace(self.slot, failures=self.slot.failures + 1)
            elif isinstance(a, LaunchWorkload):
                if a.attempt_id is not None:
                    continue
                assert self.node is not None
                assert self.node.phase is P.READY
                assert not self.running, "second running attempt"
                number = self.slot.attempts + 1
                assert a.attempt == number
                self.slot = replace(self.slot, attempts=number)
                self.attempts.append(
                    WorkloadAttemptRecord(
                        id=1000 + number,
                        fleet=FLEET,
                        slot=0,
                        incarnation_id=a.incarnation_id,
                        number=number,
                        started_at=now,
                    )
                )
                self.launches.append((number, self.slot.failures))
            elif isinstance(a, StopWorkload):
                self.stops.append(a.attempt)
            elif isinstance(a, MarkSlotDone):
                self.slot = replace(self.slot, done=True)
            elif isinstance(a, DeleteNode):
                self.replaced += 1
                self.node = None
            elif isinstance(a, Notice):
                pass
            else:
                raise AssertionError(f"unexpected action {a}")
