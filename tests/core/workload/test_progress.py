"""core/workload/progress.py `advance`: what a probe's reading of the progress file changes
on the attempt, and at which times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tpucared.core.workload.progress import Progress, Recorded, advance

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_the_workloads_own_times_are_kept() -> None:
    seen = Progress(step=10, step_at=at(50), checkpoint=5, checkpoint_at=at(30),
                    first_step_at=at(20), modified_at=at(51))  # fmt: skip
    assert advance(Recorded(), seen, at(60), at(0)) == {
        "last_step": 10,
        "last_step_at": at(50),
        "first_step_at": at(20),
        "last_checkpoint": 5,
        "last_checkpoint_at": at(30),
    }


def test_without_times_the_files_modification_time_when_first_seen() -> None:
    changes = advance(Recorded(), Progress(step=3, modified_at=at(40)), at(60), at(0))
    assert changes == {"last_step": 3, "last_step_at": at(40), "first_step_at": at(40)}
    # No file time either: the probe's.
    assert advance(Recorded(), Progress(checkpoint=2), at(60), at(0)) == {
        "last_checkpoint": 2,
        "last_checkpoint_at": at(60),
    }


def test_nothing_new_writes_nothing_and_first_step_is_set_once() -> None:
    recorded = Recorded(first_step_at=at(5), last_step=7, last_step_at=at(40),
                        last_checkpoint=5, last_checkpoint_at=at(30))  # fmt: skip
    same = Progress(step=7, step_at=at(45), checkpoint=5, modified_at=at(45))
    assert advance(recorded, same, at(60), at(0)) == {}
    later = Progress(step=9, modified_at=at(55))
    assert advance(recorded, later, at(60), at(0)) == {"last_step": 9, "last_step_at": at(55)}


def test_a_workers_clock_off_is_clamped_to_the_attempt_and_the_probe() -> None:
    seen = Progress(step=1, step_at=at(500), checkpoint=1, checkpoint_at=at(-500))
    changes = advance(Recorded(), seen, at(60), at(10))
    assert changes["last_step_at"] == at(60)
    assert changes["last_checkpoint_at"] == at(10)


def test_updated_is_what_the_attempt_records_after_the_write() -> None:
    recorded = Recorded(first_step_at=at(5), last_step=7, last_step_at=at(40))
    changes = advance(recorded, Progress(step=9, checkpoint=8, modified_at=at(55)), at(60), at(0))
    assert recorded.updated(changes) == Recorded(at(5), 9, at(55), 8, at(55))
