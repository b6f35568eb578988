"""The create rate: at most `Policy.creates_per_minute` create requests in any 60 s, per cloud
API and project.

Why a rate and not only the creates in flight: a create counts as in flight from its call
until its node is READY, which takes the emulator seconds and a real TPU one to a few minutes.
A cap of 8 in flight was 8 creates a minute or fewer against the real API, whatever the
fleet's size: a 10,000-node fleet that lost 3,500 nodes came back in hours although the API
would have taken ~90 creates a minute. The API's own limit is a rate: the TPU API is reported
to refuse more than ~91 CreateNode requests a minute per project ("Maximum number of
CreateNode requests per minute"), and Compute Engine counts writes per project, region and
minute (docs/daemon.md, "Request quotas"). So the rate is the limit that binds by default,
and the in-flight caps (`max_creates`, `max_creates_per_fleet`) are set high.

A failing create (a stockout) counts like any other: a fleet hunting for capacity with many
slots stays within the rate too. The window slides (any 60 s), which also keeps within a
quota counted per calendar minute.

The runtime remembers when it sent each create (runtime/nodes/calls.py) and passes those
times in (`CreatesSent`). A restarted daemon remembers none: in its first minute it may send
up to the limit again; a refusal for the rate is RATE_LIMITED, retried after the transient
backoff.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta

from tpucared.core.model.specs import DEFAULT_PROJECT

WINDOW = timedelta(minutes=1)

RateKey = tuple[str, str]  # (cloud API, project: core DEFAULT_PROJECT for `gcp.project`)
CreatesSent = Mapping[RateKey, tuple[datetime, ...]]  # when each create was sent
NO_CREATES_SENT: CreatesSent = {}


class CreateRate:
    """One plan's room under the limit: the creates sent in the last minute, plus those the
    plan has added so far (`count`)."""

    def __init__(self, limit: int, sent: CreatesSent, now: datetime) -> None:
        self._limit = limit
        self._recent = {
            key: sorted(t for t in times if now - t < WINDOW) for key, times in sent.items()
        }
        self._planned: Counter[RateKey] = Counter()
        # The same answer for every slot held once the room is gone (thousands in a storm).
        self._answers: dict[tuple[RateKey, int], tuple[str, datetime | None]] = {}

    def why_not(self, key: RateKey) -> tuple[str | None, datetime | None]:
        """Why a create of `key` must wait, and until when (None: the next plan), or
        (None, None) if there is room."""
        recent = self._recent.get(key, [])
        used = len(recent) + self._planned[key]
        if used < self._limit:
            return None, None
        answer = self._answers.get((key, used))
        if answer is None:
            # The room comes back when enough of the oldest sends leave the window.
            over = used - self._limit
            until = recent[over] + WINDOW if over < len(recent) else None
            api, project = key
            where = f"project {project}" if project != DEFAULT_PROJECT else "the project"
            why = (
                f"create rate: {used} creates in the last minute for the {api} API in {where} "
                f"(policy.creates_per_minute = {self._limit})"
            )
            answer = self._answers[(key, used)] = (why, until)
        return answer

    def count(self, key: RateKey) -> None:
        self._planned[key] += 1
