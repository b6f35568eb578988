"""Compute Engine API rate quotas: per-minute buckets per (project, region, metric), refilled at
the start of each clock minute, as the real quotas are (research section 7.1: "if a project
reaches a quota limit at 10:00:15, the quota refills at the start of the next synchronized
interval, such as 10:01:00"). The default numbers are not published (research section 9, rows 4
and 27), so `EmulatorOptions.compute_rate_limits` sets them (metric -> requests per minute);
none is limited by default. Exceeding one is HTTP 403 `rateLimitExceeded` (domain
`usageLimits`), or 429 with `compute_rate_limit_status`.

Metrics (the simplified ones of the research, and the method each counts):
    reads_per_region           instances.get / list, machineTypes.get, zoneOperations.get / list
    writes_per_region          instances.insert / delete
    heavy_weight_read_requests_per_region   zoneOperations.wait
    default_per_region         instances.insert / delete / getGuestAttributes (legacy group),
                               instanceGroupManagers.listManagedInstances (research §6.4)
    (the other MIG, template and policy calls count as reads or writes, as instances do)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from tpucared_emulator.compute.errors import ComputeError
from tpucared_emulator.projects import project_number

METRICS = (
    "reads_per_region",
    "writes_per_region",
    "heavy_weight_read_requests_per_region",
    "default_per_region",
)


def metrics_of(method: str, tail: str) -> tuple[str, ...]:
    """The metrics a compute request (its path after /compute/v1/) counts against."""
    if tail.endswith("/wait"):
        return ("heavy_weight_read_requests_per_region",)
    if tail.endswith(("/getGuestAttributes", "/listManagedInstances")):
        return ("default_per_region",)
    if method in ("POST", "DELETE"):
        return ("writes_per_region", "default_per_region")
    return ("reads_per_region",)


class RateLimits:
    def __init__(self, limits: Mapping[str, int], status: int) -> None:
        unknown = set(limits) - set(METRICS)
        if unknown:
            raise ValueError(f"unknown compute rate metrics {sorted(unknown)}; one of {METRICS}")
        self.limits = dict(limits)
        self.status = status
        self._minute = -1
        self._used: Counter[tuple[str, str, str]] = Counter()

    def take(self, now: float, project: str, region: str, metrics: tuple[str, ...]) -> None:
        """Count one request; raise the rate error if a metric's minute is used up (then the
        request counts against nothing)."""
        if not self.limits:
            return
        minute = int(now // 60)
        if minute != self._minute:  # the synchronized refill
            self._minute = minute
            self._used.clear()
        for metric in metrics:
            limit = self.limits.get(metric)
            if limit is not None and self._used[(project, region, metric)] >= limit:
                retry = max(1, round((minute + 1) * 60 - now))
                raise ComputeError(
                    self.status,
                    "rateLimitExceeded",
                    f"Quota exceeded for quota metric '{metric}' and limit '{metric} per minute' "
                    f"of service 'compute.googleapis.com' for consumer "
                    f"'project_number:{project_number(project)}'.",  # the number, as Google's
                    domain="usageLimits",
                    headers={"Retry-After": str(retry)},
                )
        for metric in metrics:
            self._used[(project, region, metric)] += 1
