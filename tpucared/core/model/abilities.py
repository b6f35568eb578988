"""What a cloud can do, as its adapter states it: the core decides on these, never on API names.

Each cloud adapter (tpucared/gcp/tpu/cloud.py, tpucared/gcp/compute/cloud.py, a test's own)
holds one `CloudAbilities` (`Cloud.abilities`, ports/cloud.py); the runtime's observer stamps
it on every list that cloud answers (`ZoneObservation.abilities`), so it reaches the planner
with the observations (core/view.py `View.abilities`, by the API that listed a node).
A rule that depends on the cloud asks "can this cloud ...", e.g. core/nodes/preemption.py:
"does it keep records of preemptions its node states do not show, and what are they called".
The defaults are a cloud that can do none of the optional things.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CloudAbilities:
    # A queued slot that waits for capacity before its node exists (the TPU API's queued
    # resources): `provisioning = "queued"` fleets and their queued-resource lists.
    queued: bool = False
    # One slot of several slices running one job (a TPU API multislice queued resource).
    multislice: bool = False
    # Creates into a named reservation.
    reservations: bool = False
    # Where the nodes' own states do not say "preempted": what the cloud's record of a
    # preemption is called (Compute Engine: "compute.instances.preempted operation"), read
    # only in a tick that lost a serving node (core/nodes/preemption.py). None: the node's
    # state says it (the TPU API's PREEMPTED).
    preemption_records: str | None = None
    # What its record of a host-maintenance termination is called, read with the preemption
    # records; None: it keeps none apart from the node's state.
    maintenance_records: str | None = None
    # A pending host-maintenance window can be started now (`on_maintenance = "now"`).
    early_maintenance: bool = False
    # The workers publish their SSH host keys where the daemon can read them.
    host_keys: bool = False
    # OS Login: the daemon's key imported into its account's login profile.
    os_login: bool = False
    # Flex-start capacity (a run bounded by `max_run_duration`).
    flex_start: bool = False
    # Its operations can be waited on: one request the cloud answers when the operation ends
    # (Compute Engine's zoneOperations.wait), instead of polls on a schedule; the port's
    # `OperationWaits` (ports/cloud.py). The TPU API has none: its discovery document's
    # operations methods are get, list, cancel and delete.
    operation_wait: bool = False

    @property
    def keeps_loss_records(self) -> bool:
        """Its node states do not say "preempted": its records of losses are to be read."""
        return self.preemption_records is not None


NO_ABILITIES = CloudAbilities()
