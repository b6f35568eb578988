"""What one `[[notify]]` table asks for: a webhook, its body format, the news it wants."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum


class NotifyFormat(StrEnum):
    SLACK = "slack"  # {"text": ...}: Slack, Mattermost, Rocket.Chat and Discord's /slack
    JSON = "json"  # the news as a JSON object, for anything else


class NotifyOn(StrEnum):
    """The kinds of news a person must act on (the `on` key)."""

    NOTICE = "notice"  # quota, permission, config the cloud refuses, an unreachable zone
    FAILURE_BUDGET = "failure_budget"  # a slot's workload out of its failure budget
    STOCKOUT = "stockout"  # a slot waiting for capacity longer than `stockout_after`
    UNHEALTHY = "unhealthy"  # the daemon's /healthz turned 503, and back
    MAINTENANCE = "maintenance"  # the cloud announced (or moved) a node's maintenance window


@dataclass(frozen=True)
class NotifySpec:
    """One webhook. `url` is a secret (a Slack webhook's path is its credential): it is kept
    out of `repr` and of every log line, which name the webhook by `name` only."""

    name: str
    url: str | None = field(default=None, repr=False)  # as written in the config
    url_env: str | None = None  # or: the daemon's environment variable holding it
    format: NotifyFormat = NotifyFormat.SLACK
    on: frozenset[NotifyOn] = frozenset(NotifyOn)
    stockout_after: timedelta = timedelta(minutes=30)
    min_interval: timedelta = timedelta(minutes=10)  # per subject: the same news at most once
