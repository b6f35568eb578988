"""EmulatorOptions: everything that configures one emulator instance, with test-friendly defaults.

Shared by the state (timing, catalog, paging, capacity), the server (request log size) and the
CLI (which maps flags onto these fields). Timing can also be changed at run time through
`PUT /_emulator/v1/timing`; capacity through `PUT /_emulator/v1/capacity`.

The `compute_*` fields configure the Compute Engine surface (compute/). Most of them choose
between answers Google has not documented (docs/research/compute-engine.md section 9, whose
row each cites): the default is the most documented behaviour, and the daemon must do well
under every choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tpucared_emulator.catalog import (
    DEFAULT_ACCELERATOR_TYPES,
    DEFAULT_RUNTIME_VERSIONS,
    DEFAULT_ZONES,
    Catalog,
)

STOCKOUT_CODES = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")


@dataclass
class EmulatorOptions:
    # Lifecycle timing, in seconds of the emulator's clock.
    create_seconds: float = 2.0  # CREATING -> READY (or -> failed for lack of capacity)
    delete_seconds: float = 1.0  # DELETING -> gone; also STOPPING -> STOPPED
    queued_provision_seconds: float = 1.0  # least time a queued resource waits for resources
    preemptible_max_seconds: float = 24 * 3600.0  # preemptible (not spot) nodes die at 24 h
    # Mean lifetime of READY spot/preemptible nodes before a random preemption; None: never.
    spot_mean_lifetime_seconds: float | None = None
    # When a create meets a stockout. Nobody outside Google knows when the real API judges
    # capacity, so the daemon must do well under both: "post" (the create call takes capacity
    # or is doomed at once; its operation fails after create_seconds) or "end" (capacity is
    # judged when the operation ends: a create posted during a stockout succeeds if capacity
    # came back meanwhile).
    capacity_judged: str = "post"
    # How waiting queued resources and plain creates compete for capacity that frees (queued.py).
    # Google documents only that a request waits "until there are sufficient free resources"
    # (tpu/docs/queued-resources), not when the queue is looked at nor who wins against a
    # nodes.create. "at-once": waiting requests take freed capacity first, the instant it frees
    # (a create that comes later finds none); "scan": the service looks at its queue every
    # `queued_scan_seconds` (at multiples of it on the emulator's clock), and between scans a
    # plain create may take the capacity first.
    queued_serve: str = "at-once"
    queued_scan_seconds: float = 10.0

    # What the cloud offers. `offerings` (zone -> accelerator types) overrides the other two.
    zones: Sequence[str] = DEFAULT_ZONES
    accelerator_types: Sequence[str] = DEFAULT_ACCELERATOR_TYPES
    offerings: Mapping[str, Sequence[str]] | None = None
    runtime_versions: Sequence[str] = DEFAULT_RUNTIME_VERSIONS

    # (zone, accelerator type) -> how many nodes of that type may exist at once. Absent: no limit.
    capacity: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # nodes.create requests a project may send per minute (the clock's minute), beyond which
    # they are refused with HTTP 429 "Maximum number of CreateNode requests per minute". Not
    # published by Google: ~91 is the only figure reported (tpu.googleapis.com/qps/create,
    # research section 9 row 26). None: no limit.
    create_requests_per_minute: int | None = None

    # nodes.list page size when the client sends none: small, so that a client ignoring
    # nextPageToken misses nodes in tests instead of in production.
    default_page_size: int = 5
    max_page_size: int = 1000

    # Simulated worker hosts (hosts/): every worker of a READY node is an SSH server running
    # commands as local processes. Off by default here (nothing binds ports unasked); the
    # `tpucared emulator` CLI turns it on.
    ssh_hosts: bool = False
    # Port the simulated SSH server of every worker listens on, at the worker's own loopback
    # address. Used by WorkerHosts implementations; the API itself never mentions SSH ports.
    ssh_port: int = 22
    # Where the simulated workers' home directories live; None: a temporary directory,
    # removed when the emulator stops.
    hosts_dir: str | None = None
    # OS Login enforced on every project (oslogin.py): workers accept only keys imported
    # through the OS Login API, for the profile's user, and ignore `ssh-keys` metadata.
    os_login: bool = False

    # --- Compute Engine (compute/). Zone -> TPU machine types offered there; None: every type
    # of catalog.py's MACHINE_TYPES in every zone of its DEFAULT_COMPUTE_ZONES. Instances use
    # the timing above (create_seconds: PROVISIONING -> STAGING -> RUNNING; delete_seconds)
    # and `capacity`, keyed (zone, machine type).
    compute_offerings: Mapping[str, Sequence[str]] | None = None
    # Unconfirmed (row 1): where a stockout shows. "operation": the insert returns a RUNNING
    # operation that ends DONE with the error (all evidence); "sync_http": the insert itself
    # fails with HTTP 503 and the same reason; "born_done": the insert returns an operation
    # already DONE with the error.
    compute_stockout_mode: str = "operation"
    # Unconfirmed (row 2): the stockout code, ZONE_RESOURCE_POOL_EXHAUSTED or
    # ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS (both are real; which one a TPU VM gets is not
    # known). Both carry errorDetails (help, localizedMessage, errorInfo).
    compute_stockout_code: str = "ZONE_RESOURCE_POOL_EXHAUSTED"
    # Both seen (row 3): where an insert beyond the region's chip quota (`PUT
    # /_emulator/v1/quota`) fails: "sync_http" (HTTP 403 quotaExceeded) or "operation"
    # (QUOTA_EXCEEDED in the operation, httpErrorStatusCode 403).
    compute_quota_mode: str = "sync_http"
    # Unconfirmed (row 5): what a request repeated with the same requestId gets.
    # "same_operation": the original operation, even when DONE; "ignored": the requestId is not
    # remembered (a repeated insert is a new one: 409 alreadyExists for its own name).
    compute_request_id_replay: str = "same_operation"
    # Documented (row 6): operations.wait returns when DONE or after at most this long (the
    # real API: 2 minutes), and may return earlier, before DONE; unconfirmed how often.
    compute_wait_max_seconds: float = 5.0
    compute_wait_early_return_probability: float = 0.0
    # Unconfirmed (row 7): the operations a preemption records. "preempted_only": one
    # compute.instances.preempted; "preempted_plus_delete": also a `delete` by the system for
    # a DELETE-action VM. With this probability, no operation at all (the daemon must count a
    # lost spot VM without one as a preemption too).
    compute_preempt_records: str = "preempted_only"
    compute_preempt_op_missing_probability: float = 0.0
    # Unconfirmed (row 9): how long a preempted VM is STOPPING before it is TERMINATED (STOP)
    # or gone (DELETE); the real ACPI window is 30 s for spot VMs. None: delete_seconds.
    compute_stopping_seconds: float | None = None
    # Unconfirmed (row 10): whether a spot VM's scheduling.preemptionNoticeDuration gives a
    # notice (instance/preempted TRUE that long) before a preemption that brings none itself.
    compute_honour_notice_duration: bool = True
    # Unconfirmed (row 23): getGuestAttributes answers 404 unless the instance's metadata has
    # enable-guest-attributes=TRUE (Google's documented switch; the page was not reached).
    compute_guest_attributes_need_flag: bool = True
    # Unpublished numbers (rows 4 and 27): per-minute rate quotas per (project, region),
    # metric -> requests per minute (compute/limits.py names the metrics); empty: unlimited.
    # Exceeding one is HTTP 403 rateLimitExceeded, as documented, or compute_rate_limit_status.
    compute_rate_limits: Mapping[str, int] = field(default_factory=dict)
    compute_rate_limit_status: int = 403
    # Unconfirmed (row 11): which worker id keys a VM's metadata server lists under
    # instance/attributes/: "both" (agent-worker-number and tpu-env's WORKER_ID, as on TPU API
    # VMs), "agent-worker-number", "tpu-env" or "none".
    compute_worker_id_source: str = "both"
    # Unconfirmed (row 11): a MIG's worker ids in the order of its members' names
    # ("ordered": x-w-001 is worker 0) or "shuffled" (a random permutation, fixed per MIG).
    compute_mig_worker_order: str = "ordered"
    # Unconfirmed (row 12): what a MIG whose defaultActionOnFailure is DO_NOTHING does when a
    # member is preempted, terminated or vanishes: "leave" (a STOP-preempted member stays
    # TERMINATED, a deleted one stays listed by listManagedInstances without instanceStatus)
    # or "recreate_member" (as REPAIR does: the same name created again). REPAIR always does.
    compute_mig_on_member_loss: str = "leave"
    # Unconfirmed (row 13): whether instanceGroupManagers.resize works on TPU MIGs (Google:
    # "delete and then recreate"); False: 400, with wording of ours.
    compute_mig_resize_supported: bool = False
    # Unpublished: how often a MIG tries again to create a member that failed (INDIVIDUAL) or
    # checks for the capacity of the whole group (BULK).
    compute_mig_retry_seconds: float = 2.0
    # Unconfirmed (row 24): an empty list page omits `items` (Google's usual JSON) or, when
    # True, sends "items": [].
    compute_empty_items_listed: bool = False
    # Flex-start (scheduling.provisioningModel FLEX_START, research section 6.9; compute/
    # flex.py). Unconfirmed: what the insert operation does while its VM is PENDING, waiting
    # for capacity: "done_when_pending" (DONE once the VM is accepted and PENDING) or
    # "done_when_running" (RUNNING until the VM is, as for any other insert).
    compute_flex_insert_op: str = "done_when_pending"
    # Documented: at scheduling.terminationTime (start of RUNNING + maxRunDuration) the
    # termination action (DELETE) ends the VM: "delete" (STOPPING -> gone); "terminate"
    # (STOPPING -> TERMINATED, the VM stays listed) for a daemon that must cope with either.
    compute_flex_run_end: str = "delete"
    # Unconfirmed (row 17): the operation that records the run's end. "none", or "system_op":
    # a DONE operation by `system` whose operationType is invented (compute/flex.py RUN_END_OP).
    compute_flex_run_end_records: str = "none"
    # Unconfirmed (row 16): a PENDING VM whose params.requestValidForDuration runs out:
    # "instance_deleted" (gone), "instance_terminated" (left TERMINATED) or "op_error" (gone,
    # and its insert operation, kept RUNNING while PENDING, fails with an invented code).
    compute_flex_expiry: str = "instance_deleted"
    # A test knob, not a cloud behaviour: the least maxRunDuration a FLEX_START insert may ask
    # (Google's is 600 s, research row 18), lowered so that a test can run a 3-second flex run.
    compute_flex_min_run_seconds: float = 600.0
    # A test knob too: how long a flex-start VM runs, whatever its maxRunDuration asks (and
    # scheduling.terminationTime says so), for a daemon's test that cannot ask under 10 min.
    compute_flex_run_seconds: float | None = None
    # Undocumented by Google's own pages we could read (issue 39; docs/research/
    # compute-engine.md §10): whether instances.insert makes a single TPU VM FLEX_START.
    # Google documents TPU flex-start on Compute Engine through MIGs (a one-VM MIG for one
    # host); [3P] a migration guide quotes Google's provisioning-models page listing TPU7x,
    # v6e and v5p among flex-start machine series. "allow" (that quote), or "refuse" (400):
    # tpucared makes every flex-start slot a bulk MIG, which works under both.
    compute_tpu_flex_instances: str = "allow"
    # Undocumented (research §10 row M9): whether a ZONAL MIG takes bulk mode. Google's bulk
    # page limits only a regional MIG's shape (ANY_SINGLE_ZONE); [3P] a TPU7x CI runs zonal
    # bulk MIGs. "allow", or "refuse" (400 on the insert): tpucared's flex-start and
    # reservation-bound slices are zonal bulk MIGs, so then they fail as INVALID, told once.
    compute_bulk_zonal: str = "allow"

    # --- Host maintenance (maintenance_run.py; research §10.8). Documented: a VM's
    # `instance/maintenance-event` turns TERMINATE_ON_HOST_MAINTENANCE 60 s before the event
    # (compute/docs/metadata/getting-live-migration-notice); tests shorten it.
    maintenance_event_lead_seconds: float = 60.0
    # Documented: only a VM that has read maintenance-event since its last event is warned;
    # False warns every VM (for a daemon that must not rely on the rule).
    maintenance_event_needs_poll: bool = True
    # Undocumented: how long a node or VM is down for maintenance. None: the window's length
    # (windowEndTime is when "the maintenance disruption will be completed", per the
    # v2alpha1 proto's UpcomingMaintenance).
    maintenance_duration_seconds: float | None = None
    # Undocumented (row H3): what a TPU API node (not spot/preemptible: those end TERMINATED)
    # shows during maintenance: "unhealthy" (READY, health UNHEALTHY_MAINTENANCE, then HEALTHY),
    # "repairing" (REPAIRING, then READY) or "terminated" (TERMINATED, stays).
    tpu_maintenance_node: str = "unhealthy"
    # Third-party (row H5): the operationType a Compute Engine maintenance termination records
    # (gcpdiag and audit-log filters: compute.instances.terminateOnHostMaintenance).
    compute_maintenance_op_type: str = "compute.instances.terminateOnHostMaintenance"
    # Third-party (row H6): a spot VM hit by maintenance: "preempted" (exactly a preemption,
    # as vllm-project/ci-infra #608 saw on v6e) or "host_maintenance" (the op type above,
    # then the instanceTerminationAction, no restart).
    compute_spot_maintenance: str = "preempted"
    # Undocumented (row H8): instances.performMaintenance on a VM with no pending maintenance:
    # "refuse" (400 badRequest, wording ours) or "accept" (a DONE operation, nothing happens).
    compute_perform_without_window: str = "refuse"

    request_log_size: int = 100_000
    max_operations: int = 100_000  # finished operations kept for GET, oldest dropped first
    seed: int | None = None  # fixes node ids, random preemptions and random faults
    state_file: str | None = None  # JSON snapshot loaded at start and written at stop

    def __post_init__(self) -> None:
        choices = {
            "compute_stockout_mode": ("operation", "sync_http", "born_done"),
            "compute_stockout_code": STOCKOUT_CODES,
            "compute_request_id_replay": ("same_operation", "ignored"),
            "compute_quota_mode": ("sync_http", "operation"),
            "compute_preempt_records": ("preempted_only", "preempted_plus_delete"),
            "compute_worker_id_source": ("both", "agent-worker-number", "tpu-env", "none"),
            "compute_mig_worker_order": ("ordered", "shuffled"),
            "compute_mig_on_member_loss": ("leave", "recreate_member"),
            "compute_flex_insert_op": ("done_when_pending", "done_when_running"),
            "compute_flex_run_end": ("delete", "terminate"),
            "compute_flex_run_end_records": ("none", "system_op"),
            "compute_flex_expiry": ("instance_deleted", "instance_terminated", "op_error"),
            "compute_tpu_flex_instances": ("allow", "refuse"),
            "compute_bulk_zonal": ("allow", "refuse"),
            "tpu_maintenance_node": ("unhealthy", "repairing", "terminated"),
            "compute_maintenance_op_type": (
                "compute.instances.terminateOnHostMaintenance",
                "compute.instances.hostMaintenance",
            ),
            "compute_spot_maintenance": ("preempted", "host_maintenance"),
            "compute_perform_without_window": ("refuse", "accept"),
            "queued_serve": ("at-once", "scan"),
        }
        if not self.queued_scan_seconds > 0:
            raise ValueError("queued_scan_seconds must be > 0")
        if self.compute_rate_limit_status not in (403, 429):
            raise ValueError("compute_rate_limit_status must be 403 or 429")
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {getattr(self, name)!r}")

    def catalog(self) -> Catalog:
        offerings = self.offerings
        if offerings is None:
            offerings = {zone: self.accelerator_types for zone in self.zones}
        return Catalog(offerings, self.runtime_versions, self.compute_offerings)
