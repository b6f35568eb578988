"""Compute Engine's instance statuses, and the one table saying what each means to the core.

`InstanceStatus` is `Instance.status` of compute v1 by name (docs/research/compute-engine.md
§4.1, from the discovery document), plus our STATUS_UNSPECIFIED and UNRECOGNIZED.
`INSTANCE_STATES` sorts each into the core's `StateClass` (tpucared/core/model/observed.py)
and names the `[policy.timeouts]` rule (core/vocab/stuck.py) that times it while it should
end by itself, as gcp/tpu/states.py does for TPU nodes. The status's own name is what
`IncarnationRecord.cloud_state` stores.

- RUNNING is USABLE.
- PROVISIONING and STAGING are CREATING, timed by "creating": an instance is being made.
- PENDING_STOP, STOPPING, STOPPED, SUSPENDING, SUSPENDED and TERMINATED are DEAD: tpucared
  never stops or suspends an instance, a spot VM cannot be restarted (Google: "delete and
  then recreate it"), and a spot VM preempted with `instanceTerminationAction: STOP` ends
  TERMINATED, keeping its name until deleted. The ones on the way there are dead already.
- REPAIRING is TRANSIENT, timed by "repairing".
- PENDING (a flex-start VM waiting for capacity from the Dynamic Workload Scheduler) is
  WAITING, timed by "queued" (forever by default: waiting is what it was asked to do).
- DEPROVISIONING (halted, being torn down) is DELETING.
- No status at all is a blip (TRANSIENT, "unspecified"); a status we cannot read (a new
  name, a number, an object) is UNRECOGNIZED, so UNREADABLE: never acted on.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from tpucared.core.model.observed import StateClass


class InstanceStatus(StrEnum):
    """Instance.status of compute v1, by name."""

    PROVISIONING = "PROVISIONING"
    STAGING = "STAGING"
    RUNNING = "RUNNING"
    PENDING_STOP = "PENDING_STOP"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    TERMINATED = "TERMINATED"
    REPAIRING = "REPAIRING"
    PENDING = "PENDING"
    DEPROVISIONING = "DEPROVISIONING"
    # Ours, not the API's: no status sent (a blip), and a status we cannot read.
    STATUS_UNSPECIFIED = "STATUS_UNSPECIFIED"
    UNRECOGNIZED = "UNRECOGNIZED"


S = InstanceStatus
K = StateClass

# status -> (its class, the stuck-timeout rule that times it, if any).
INSTANCE_STATES: Mapping[InstanceStatus, tuple[StateClass, str | None]] = {
    S.RUNNING: (K.USABLE, None),
    S.PROVISIONING: (K.CREATING, "creating"),
    S.STAGING: (K.CREATING, "creating"),
    S.PENDING_STOP: (K.DEAD, None),
    S.STOPPING: (K.DEAD, None),
    S.STOPPED: (K.DEAD, None),
    S.SUSPENDING: (K.DEAD, None),
    S.SUSPENDED: (K.DEAD, None),
    S.TERMINATED: (K.DEAD, None),
    S.REPAIRING: (K.TRANSIENT, "repairing"),
    S.PENDING: (K.WAITING, "queued"),
    S.DEPROVISIONING: (K.DELETING, None),
    S.STATUS_UNSPECIFIED: (K.TRANSIENT, "unspecified"),
    S.UNRECOGNIZED: (K.UNREADABLE, None),
}

_BY_NAME: dict[str, InstanceStatus] = {s.value: s for s in InstanceStatus}


def parse_status(value: object) -> InstanceStatus:
    """Instance.status by name; STATUS_UNSPECIFIED when absent; UNRECOGNIZED for anything
    else (our own two names included: the API never sends them)."""
    if value is None or value == "":
        return S.STATUS_UNSPECIFIED
    if isinstance(value, str) and value in _BY_NAME:
        status = _BY_NAME[value]
        return S.UNRECOGNIZED if status in (S.UNRECOGNIZED, S.STATUS_UNSPECIFIED) else status
    return S.UNRECOGNIZED


def state_fields(status: InstanceStatus) -> dict[str, Any]:
    """An `ObservedNode`'s state, class and stuck rule for `status`, from the one table."""
    cls, rule = INSTANCE_STATES[status]
    return {"state": status, "state_class": cls, "stuck_rule": rule}
