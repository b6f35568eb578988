"""Which facts are news for a person, and when the same news may be told again.

The runtime hands in what it saw (new events, the health verdict, the slots waiting for
capacity) with the time; these rules return `News` items and decide, per webhook, which of them
go out: each webhook only the kinds in its `on`, the same subject at most once per
`min_interval`, and at most `PER_MINUTE` posts a minute, the rest folded into one "and N more".
No I/O and no clock: the notifier (runtime/notifications.py) owns the state and the time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tpucared.core.model.records import EventRecord
from tpucared.core.nodes.maintenance import SCHEDULED_EVENT as MAINTENANCE_EVENT
from tpucared.core.notify.spec import NotifyOn, NotifySpec

PER_MINUTE = 6  # posts per webhook per minute; a storm becomes one summary, not a flood
GAVE_UP_KEY = "workload-gave-up/"  # the planner's notice key when a slot's crash budget is out
_TOLD_SEVERITIES = frozenset({"warning", "error"})  # info notices (drift) are not paged


@dataclass(frozen=True)
class News:
    kind: NotifyOn
    subject: str  # stable for one fact: the rate limit's key
    summary: str  # one line a person can act on
    at: datetime
    fleet: str | None = None
    zone: str | None = None
    slot: int | None = None


def event_news(events: Iterable[EventRecord]) -> list[News]:
    """News in new events: warning and error notices (a slot out of its failure budget is its
    own kind), maintenance windows announced, and zones that became unreachable."""
    out = []
    for e in events:
        if e.kind == "notice" and str(e.details.get("severity")) in _TOLD_SEVERITIES:
            key = str(e.details.get("key") or e.message)
            kind = NotifyOn.FAILURE_BUDGET if key.startswith(GAVE_UP_KEY) else NotifyOn.NOTICE
            out.append(News(kind, key, e.message, e.at, fleet=e.fleet, slot=e.slot))
        elif e.kind == MAINTENANCE_EVENT:
            out.append(_maintenance_news(e))
        elif e.kind == "zone.unreachable":
            zone = e.details.get("zone")
            out.append(
                News(
                    NotifyOn.NOTICE,
                    f"zone-unreachable/{zone}/{e.at.isoformat()}",
                    e.message,
                    e.at,
                    zone=None if zone is None else str(zone),
                )
            )
    return out


def _maintenance_news(e: EventRecord) -> News:
    """A window announced or moved (core/nodes/maintenance.py): told once per node and start."""
    where = f"{e.fleet}/{e.slot}" if e.fleet is not None else str(e.node)
    return News(
        NotifyOn.MAINTENANCE,
        f"maintenance/{e.node}/{e.details.get('start')}",
        f"{where}: {e.message}",
        e.at,
        fleet=e.fleet,
        slot=e.slot,
    )


def health_news(was_healthy: bool, healthy: bool, reason: str, now: datetime) -> News | None:
    """News when the daemon's /healthz verdict changes (the rule is telemetry's Health)."""
    if was_healthy == healthy:
        return None
    what = "healthy again" if healthy else f"unhealthy: {reason}"
    return News(NotifyOn.UNHEALTHY, f"health/{now.isoformat()}", f"tpucared is {what}", now)


def waiting_since(
    before: Mapping[tuple[str, int], datetime], waiting: Iterable[tuple[str, int]], now: datetime
) -> dict[tuple[str, int], datetime]:
    """Since when each slot now waiting for capacity has been waiting (new ones: `now`)."""
    return {slot: before.get(slot, now) for slot in waiting}


def stockout_news(
    since: Mapping[tuple[str, int], datetime], after: timedelta, now: datetime
) -> list[News]:
    """Slots waiting longer than `after`: one item per slot and stockout (the subject carries
    its start, so a long stockout is told once, a new one again)."""
    return [
        News(
            NotifyOn.STOCKOUT,
            f"stockout/{fleet}/{slot}/{start.isoformat()}",
            f"{fleet}/{slot} has waited {_minutes(now - start)} for TPU capacity "
            "(tpucared keeps hunting)",
            now,
            fleet=fleet,
            slot=slot,
        )
        for (fleet, slot), start in sorted(since.items())
        if now - start >= after
    ]


@dataclass
class RateLimit:
    """One webhook's memory: when each subject was last told, and this minute's posts."""

    told: dict[str, datetime] = field(default_factory=dict)
    minute: datetime | None = None
    posts: int = 0

    def admit(
        self, spec: NotifySpec, news: Sequence[News], now: datetime
    ) -> tuple[list[list[News]], list[News]]:
        """(the posts to send now, each a list of news: one, or a fold of several; the news
        that waits for room in the next minute: hand it in again then)."""
        fresh = [
            n
            for n in news
            if n.kind in spec.on
            and (n.subject not in self.told or now - self.told[n.subject] >= spec.min_interval)
        ]
        self._forget(now - max(spec.min_interval, spec.stockout_after) * 2)
        if self.minute is None or now - self.minute >= timedelta(minutes=1):
            self.minute, self.posts = now, 0
        room = PER_MINUTE - self.posts
        if room <= 0 or not fresh:
            return [], fresh  # not marked told: it goes out when there is room
        for n in fresh:
            self.told[n.subject] = now
        posts = [[n] for n in fresh[: room - 1]] if len(fresh) > room else [[n] for n in fresh]
        if len(fresh) > room:
            posts.append(fresh[room - 1 :])  # one post: the first, "and N more"
        self.posts += len(posts)
        return posts, []

    def _forget(self, before: datetime) -> None:
        for subject in [s for s, at in self.told.items() if at < before]:
            del self.told[subject]


def _minutes(d: timedelta) -> str:
    minutes = int(d.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"
