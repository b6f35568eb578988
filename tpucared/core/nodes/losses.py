"""Why a serving node was lost, as far as what the lists show can tell (issue 41, item 4).

Where it sits: the moves that end a node (core/nodes/step.py `die`, `external_delete`, a flex
run's end; core/workload/planner.py's preemption notice) ask `seen_cause` for the `LossCause`
their Transition carries (core/model/causes.py); the store records it as `nodes.loss_cause`
and in the event of the loss. Rules, first match wins:

  its recorded maintenance window is ONGOING, or the loss falls inside the      MAINTENANCE
  announced window (start <= lost at <= end)
  the node's own state says why (`ObservedNode.lost_to`: TPU PREEMPTED)         that cause
  its health says host maintenance (UNHEALTHY_MAINTENANCE)                      MAINTENANCE
  anything else                                                                 UNKNOWN

UNKNOWN is never a guess turned into a cause: a Compute Engine VM's loss is then worded by
the cloud's own records, read in the same tick (core/nodes/preemption.py `worded`:
a `compute.instances.preempted` operation -> PREEMPTED, a host-maintenance one ->
MAINTENANCE), and stays UNKNOWN where none is found, even where the slot still counts it as a
preemption. A window beats a preemption record: the cloud logs host-maintenance terminations
of spot VMs as preemptions too (vllm-project/ci-infra #608, [3P]).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from tpucared.core.model.causes import LossCause
from tpucared.core.model.observed import MaintenanceWindow, ObservedNode

ONGOING: Final = "ONGOING"  # upcomingMaintenance.maintenanceStatus while the window runs
# How long before its window a VM is told of the maintenance (`instance/maintenance-event`
# turns TERMINATE_ON_HOST_MAINTENANCE "about 60 s before": issue 41, Google's live-migration
# notice page), with slack for a probe's pace: a notice this close to an announced window is
# the window's (the workload planner's notice path, core/workload/planner.py `_lost`).
NOTICE_LEAD: Final = timedelta(minutes=2)
MAINTENANCE_HEALTH: Final = "UNHEALTHY_MAINTENANCE"  # TPU Node.Health during host maintenance


def in_window(
    window: MaintenanceWindow | None, at: datetime, lead: timedelta = timedelta(0)
) -> bool:
    """The node's announced window is running at `at`: the cloud says ONGOING, or `at` falls
    between its start (less `lead`) and its end (an end not said: from its start on)."""
    if window is None:
        return False
    if window.status == ONGOING:
        return True
    if window.start is None or at < window.start - lead:
        return False
    return window.end is None or at <= window.end


def seen_cause(
    window: MaintenanceWindow | None,
    node: ObservedNode | None,
    health: str | None,
    lost_at: datetime,
) -> LossCause:
    """The cause of a serving node's loss at `lost_at` by what is recorded and listed (the
    rules in the module docstring): `window` its recorded maintenance window, `node` what the
    list shows of it (None: gone), `health` its last health."""
    if in_window(window, lost_at):
        return LossCause.MAINTENANCE
    if node is not None and node.lost_to is not None:
        return node.lost_to
    if health == MAINTENANCE_HEALTH:
        return LossCause.MAINTENANCE
    return LossCause.UNKNOWN
