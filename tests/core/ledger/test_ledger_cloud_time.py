"""The ledger starts a loss at the cloud's own time of it, where the cloud says (a Compute
Engine preemption record's time, nodes.cloud_lost_at), not when the daemon noticed: the
attempt stops being productive there, and the time until the daemon marked the node dead is
the recovery's detection. Without it (the TPU API gives no time) the loss starts at dead_at.
"""

from __future__ import annotations

from tpucared.core.ledger.categories import Category, Phase, SlotHistory
from tpucared.core.ledger.tiling import slot_ledger
from tpucared.core.model.causes import LossCause
from tpucared.core.model.records import AttemptOutcome

from .test_ledger import at, attempt, create, node, table

C = Category
P = Phase
LOST = {"dead_at": 1000, "deleting_at": 1035, "deleted_at": 1100}


def preempted(cloud_lost_at: float | None) -> SlotHistory:
    """A node READY at 100, its attempt from 130, preempted (the cloud's time `cloud_lost_at`),
    marked dead at 1000, deleted at 1100; its replacement READY at 1400, running at 1450."""
    first = node(1, 0, ready_at=100, **LOST, loss_cause=LossCause.PREEMPTED,
                 cloud_lost_at=cloud_lost_at)  # fmt: skip
    return SlotHistory(
        "f", 0,
        nodes=[first, node(2, 1100, creating_at=1110, ready_at=1400)],
        attempts=[attempt(1, 1, 130, 1030, AttemptOutcome.PREEMPTED), attempt(2, 2, 1450)],
        creates=[create(0, "ok", 1), create(1100, "ok", 2)],
    )  # fmt: skip


def test_the_recovery_starts_at_the_clouds_time_and_detection_is_the_daemons_delay() -> None:
    ledger = slot_ledger(preempted(940), at(2000))
    assert table(ledger) == [
        (0, 100, C.STARTUP, P.PROVISIONING),
        (100, 130, C.STARTUP, P.SETUP),
        (130, 940, C.PRODUCTIVE, None),  # nothing trained after the cloud took the VM
        (940, 1000, C.RECOVERY, P.DETECTION),  # the 60 s the daemon took to notice
        (1000, 1100, C.RECOVERY, P.DELETE),
        (1100, 1400, C.RECOVERY, P.PROVISIONING),
        (1400, 1450, C.RECOVERY, P.SETUP),
        (1450, 2000, C.PRODUCTIVE, None),
    ]
    detection = ledger[3]
    assert (detection.cause, detection.node, detection.zone) == (
        LossCause.PREEMPTED, "n-1", "us-east5-b",
    )  # fmt: skip


def test_without_the_clouds_time_the_loss_starts_when_the_daemon_marked_it_dead() -> None:
    rows = table(slot_ledger(preempted(None), at(2000)))
    assert rows[2:4] == [(130, 1000, C.PRODUCTIVE, None), (1000, 1100, C.RECOVERY, P.DELETE)]


def test_a_clouds_time_outside_the_nodes_ready_life_is_not_used() -> None:
    # Before READY or after the daemon's dead_at, the clocks disagree with the records:
    # the loss starts at dead_at, as without it.
    for skewed in (50, 1020):
        rows = table(slot_ledger(preempted(skewed), at(2000)))
        assert rows[2:4] == [(130, 1000, C.PRODUCTIVE, None), (1000, 1100, C.RECOVERY, P.DELETE)]


def test_without_a_workload_a_ready_node_stops_being_productive_at_the_clouds_time() -> None:
    history = SlotHistory(
        "f", 0, workload=False,
        nodes=[node(1, 0, ready_at=100, **LOST, loss_cause=LossCause.PREEMPTED, cloud_lost_at=900)],
    )  # fmt: skip
    assert table(slot_ledger(history, at(1100)))[1:3] == [
        (100, 900, C.PRODUCTIVE, None),
        (900, 1000, C.RECOVERY, P.DETECTION),
    ]
