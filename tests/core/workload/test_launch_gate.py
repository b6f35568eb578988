"""A launch's secrets and clean slate (core/workload/launch_gate.py), as the planner decides on
them (hold and notice, or a launch that says why it cleans up again) and as the runtime's
executor checks them at execution (a refusal, with the rule's words, for its event)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tpucared.core.model.records import (
    AttemptOutcome,
    IncarnationRecord,
    NodePhase,
    SlotRecord,
    WorkloadAttemptRecord,
)
from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.vocab.actions import Notice, Severity
from tpucared.core.workload.actions import LaunchWorkload
from tpucared.core.workload.inputs import SlotProbe, Unclean, WorkerProbe
from tpucared.core.workload.launch_gate import (
    cannot_launch,
    missing_secrets,
    refuse_after_cleanup,
    refuse_secrets,
    secrets_present,
    unclean_words,
)
from tpucared.core.workload.planner import SlotPlan, SlotWork, WorkloadPolicy, plan_slot
from tpucared.core.workload.probes import is_news

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
SPEC = WorkloadSpec(run="python3 train.py", secrets={"API": "TEST_API", "WANDB": "WANDB_KEY"})
PLAIN = WorkloadSpec(run="python3 train.py")
NOT_REACHED = Unclean(3, ((2, "not cleaned: timeout"),))
TWO = Unclean(3, ((1, "not cleaned: refused"), (2, "busy (group stuck, 0 holders)")))


# ---------------------------------------------------------------------------------------------
# The rules alone


@pytest.mark.parametrize(
    ("spec", "names", "present", "missing"),
    [
        (SPEC, {"TEST_API", "WANDB_KEY", "HOME"}, {"TEST_API", "WANDB_KEY"}, ()),
        (SPEC, {"TEST_API", "HOME"}, {"TEST_API"}, ("WANDB_KEY",)),
        (SPEC, set(), set(), ("TEST_API", "WANDB_KEY")),  # sorted
        (PLAIN, set(), set(), ()),  # no secrets: nothing to miss
        # Two secrets from one variable: missing once.
        (WorkloadSpec(run="x", secrets={"A": "V", "B": "V"}), set(), set(), ("V",)),
    ],
)
def test_present_and_missing(spec: WorkloadSpec, names: set[str], present: set[str],
                             missing: tuple[str, ...]) -> None:  # fmt: skip
    # Only the spec's variables are told (never the rest of the environment, never values).
    assert secrets_present(spec, names) == present
    assert missing_secrets(spec, present) == missing
    assert missing_secrets(spec, names) == missing


@pytest.mark.parametrize(
    ("present", "other", "why"),
    [
        (None, None, None),  # not told: nothing to say
        (None, "workload.files: a not found", "workload.files: a not found"),
        ({"TEST_API", "WANDB_KEY"}, None, None),
        ({"TEST_API", "WANDB_KEY"}, "workload.files: a not found", "workload.files: a not found"),
        ({"TEST_API"}, None, "the daemon's environment lacks WANDB_KEY (workload.secrets)"),
        # A secret missing is said first.
        (set(), "workload.files: a not found",
         "the daemon's environment lacks TEST_API, WANDB_KEY (workload.secrets)"),
    ],
)  # fmt: skip
def test_cannot_launch(present: set[str] | None, other: str | None, why: str | None) -> None:
    assert cannot_launch(SPEC, present, other) == why


@pytest.mark.parametrize(
    ("names", "refused"),
    [
        ({"TEST_API", "WANDB_KEY"}, None),
        ({"TEST_API"}, "attempt 4 not launched: the daemon's environment lacks WANDB_KEY "
                       "(workload.secrets)"),
        (set(), "attempt 4 not launched: the daemon's environment lacks TEST_API, WANDB_KEY "
                "(workload.secrets)"),
    ],
)  # fmt: skip
def test_the_executor_refuses_a_launch_without_its_secrets(
    names: set[str], refused: str | None
) -> None:
    assert refuse_secrets(SPEC, 4, names) == refused
    assert refuse_secrets(PLAIN, 4, set()) is None


@pytest.mark.parametrize(
    ("unclean", "refused"),
    [
        (None, None),  # every worker clean: launch
        (NOT_REACHED, "attempt 4 not launched: the cleanup of attempt 3 left worker(s) 2 "
                      "unclean (2: not cleaned: timeout)"),
        (TWO, "attempt 4 not launched: the cleanup of attempt 3 left worker(s) 1, 2 unclean "
              "(1: not cleaned: refused; 2: busy (group stuck, 0 holders))"),
    ],
)  # fmt: skip
def test_the_executor_refuses_a_launch_after_an_unclean_cleanup(
    unclean: Unclean | None, refused: str | None
) -> None:
    assert refuse_after_cleanup(4, unclean) == refused


def test_an_unclean_cleanup_names_its_workers() -> None:
    with pytest.raises(ValueError, match="names its workers"):
        Unclean(3, ())
    assert unclean_words(NOT_REACHED).startswith("the cleanup of attempt 3 left worker(s) 2")


# ---------------------------------------------------------------------------------------------
# The planner on these facts: one idle slot whose node is READY, 4 workers


def node() -> IncarnationRecord:
    return IncarnationRecord(
        id=7, fleet="sweep", slot=0, node_name="sweep-0", zone="z", accelerator_type="v4-32",
        phase=NodePhase.READY, phase_since=T0 - timedelta(hours=1),
        requested_at=T0 - timedelta(hours=1), ready_at=T0 - timedelta(hours=1),
    )  # fmt: skip


def ended(number: int = 3, node_id: int = 7) -> WorkloadAttemptRecord:
    return WorkloadAttemptRecord(
        id=100 + number, fleet="sweep", slot=0, incarnation_id=node_id, number=number,
        started_at=T0 - timedelta(hours=1), ended_at=T0 - timedelta(minutes=30),
        outcome=AttemptOutcome.PREEMPTED,
    )  # fmt: skip


def probe(**kw: Any) -> SlotProbe:
    """The probe of the ended attempt: nothing runs on any worker."""
    workers = tuple(replace(WorkerProbe.gone(i), since=T0, log_since=T0) for i in range(4))
    return SlotProbe("sweep", 0, 7, 3, T0, workers, **kw)


def decide(spec: WorkloadSpec, p: SlotProbe, last: WorkloadAttemptRecord | None = None) -> SlotPlan:
    w = SlotWork(
        fleet="sweep", index=0, spec=spec, slot=SlotRecord(fleet="sweep", index=0, run_id="r",
        attempts=3), node=node(), phase_after=NodePhase.READY, workers=4,
        last=ended() if last is None else last, probe=p, unwanted=None, now=T0,
    )  # fmt: skip
    return plan_slot(w, WorkloadPolicy())


@pytest.mark.parametrize(
    ("spec", "present", "blocked", "hold"),
    [
        (SPEC, frozenset({"TEST_API", "WANDB_KEY"}), None, None),
        (SPEC, frozenset({"TEST_API"}), None,
         "cannot launch: the daemon's environment lacks WANDB_KEY (workload.secrets)"),
        (SPEC, frozenset(), "workload.files: a not found",
         "cannot launch: the daemon's environment lacks TEST_API, WANDB_KEY (workload.secrets)"),
        (SPEC, None, None, None),  # not told: the executor still checks at launch
        (PLAIN, frozenset(), None, None),
        (PLAIN, frozenset(), "workload.files: a not found",
         "cannot launch: workload.files: a not found"),
    ],
)  # fmt: skip
def test_a_missing_secret_is_a_hold_and_a_notice_in_the_plan(
    spec: WorkloadSpec, present: frozenset[str] | None, blocked: str | None, hold: str | None
) -> None:
    plan = decide(spec, probe(secrets_present=present, blocked=blocked))
    if hold is None:
        assert [a.kind for a in plan.actions] == ["launch"]
        assert plan.holds == []
        return
    (notice,) = plan.actions
    assert isinstance(notice, Notice)
    assert (notice.key, notice.severity) == ("workload-blocked/sweep/0", Severity.ERROR)
    assert notice.reason == "sweep/0 cannot launch its workload: " + hold[len("cannot launch: ") :]
    assert [h.reason for h in plan.holds] == [hold]


@pytest.mark.parametrize(
    ("unclean", "last_node", "clean_after", "reason"),
    [
        (None, 7, 3, "after attempt 3 preempted"),
        (NOT_REACHED, 7, 3, "after attempt 3 preempted; the cleanup of attempt 3 left worker(s) "
         "2 unclean (2: not cleaned: timeout): cleaning up again first"),
        # The last attempt ran on another node: nothing to clean here, nothing to say.
        (NOT_REACHED, 6, None, "after attempt 3 preempted"),
    ],
)  # fmt: skip
def test_after_an_unclean_cleanup_the_launch_cleans_up_again_and_says_why(
    unclean: Unclean | None, last_node: int, clean_after: int | None, reason: str
) -> None:
    plan = decide(PLAIN, probe(unclean=unclean), ended(node_id=last_node))
    (launch,) = plan.actions
    assert isinstance(launch, LaunchWorkload)
    assert (launch.attempt, launch.clean_after, launch.reason) == (4, clean_after, reason)


@pytest.mark.parametrize(
    ("before", "fresh"),
    [
        ({}, {"secrets_present": frozenset({"TEST_API"})}),
        ({"secrets_present": frozenset()}, {"secrets_present": frozenset({"TEST_API"})}),
        ({}, {"unclean": NOT_REACHED}),
        ({"unclean": NOT_REACHED}, {"unclean": TWO}),
    ],
)
def test_a_changed_launch_fact_is_news(before: dict[str, object],
                                       fresh: dict[str, object]) -> None:  # fmt: skip
    assert is_news(probe(**before), probe(**fresh))
    assert not is_news(probe(**fresh), probe(**fresh))
