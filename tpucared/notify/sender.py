"""Posting news to webhooks, off the tick: a bounded queue per webhook and one task each.

`WebhookSender.send` only enqueues (the tick never waits for a receiver); a full queue drops
its oldest post, counted in one warning. Each post is retried on connection errors, 5xx and
429 with capped exponential backoff and full jitter, a Retry-After as the least wait, for at
most `GIVE_UP_S`: the adapters' one retry rule (`RETRY`, core/model/retry.py). Redirects are
not followed (a webhook that moved is a config change, and a redirect must not carry the body
elsewhere). The URL is a secret, Slack's path being the
credential: log lines and errors name the webhook by its `name`, never by its URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from urllib.parse import urlsplit

import aiohttp
import structlog

from tpucared.core.model.backoff import in_seconds
from tpucared.core.model.retry import RetryRule, retry_after_seconds
from tpucared.core.notify.news import News
from tpucared.core.notify.spec import NotifyFormat, NotifySpec

log = structlog.get_logger(__name__)

QUEUE_SIZE = 100  # posts waiting per webhook
TIMEOUT_S = 10.0  # per request
GIVE_UP_S = 60.0  # per post, retries included
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 15.0
FLUSH_S = 0.5  # at shutdown, for what is still queued: a stop takes under 2 s (docs/daemon.md)


class Failure(Enum):
    """Why one post was not delivered, as far as retrying it goes."""

    NO_ANSWER = "no answer"  # connection error or timeout
    BUSY = "busy"  # 429 or 5xx
    REFUSED = "refused"  # 3xx or another 4xx: retrying will not help


# The adapters' one retry rule (core/model/retry.py): full-jitter backoff doubling from
# FIRST_RETRY_S up to MAX_RETRY_S, a Retry-After as its floor, no retry after GIVE_UP_S.
RETRY: RetryRule[Failure] = RetryRule(
    attempts=None,
    waits=in_seconds(FIRST_RETRY_S, MAX_RETRY_S),
    retry_on=frozenset({Failure.NO_ANSWER, Failure.BUSY}),
    within=GIVE_UP_S,
)


class WebhookConfigError(ValueError):
    """A `[[notify]]` table the daemon cannot use (its url_env unset): one line, no secret."""


@dataclass(frozen=True)
class Webhook:
    spec: NotifySpec
    url: str = field(repr=False)

    @property
    def name(self) -> str:
        return self.spec.name


def resolve_webhooks(specs: Sequence[NotifySpec], env: Mapping[str, str]) -> list[Webhook]:
    """Each webhook with its URL, read from the environment where `url_env` says so; checked
    at start, before anything else happens, so a missing variable is one clear line."""
    out = []
    for spec in specs:
        url = spec.url if spec.url is not None else env.get(spec.url_env or "", "")
        if not url:
            raise WebhookConfigError(
                f"notify {spec.name}: environment variable {spec.url_env} is not set or empty"
            )
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WebhookConfigError(
                f'notify {spec.name}: {spec.url_env} holds no "https://host/..." url (not shown)'
            )
        out.append(Webhook(spec, url))
    return out


def body(fmt: NotifyFormat, post: Sequence[News]) -> dict[str, object]:
    """The JSON a webhook gets for one post (one news, or a fold of several)."""
    first, more = post[0], len(post) - 1
    if fmt is NotifyFormat.SLACK:
        text = f"tpucared: {first.summary}"
        if more:
            text += f" (and {more} more: `tpucared events`)"
        return {"text": text}
    return {
        "kind": first.kind.value,
        "subject": first.subject,
        "summary": first.summary,
        "fleet": first.fleet,
        "zone": first.zone,
        "slot": first.slot,
        "at": first.at.isoformat(),
        "more": [{"kind": n.kind.value, "summary": n.summary} for n in post[1:]],
    }


class WebhookSender:
    def __init__(self, webhooks: Sequence[Webhook]) -> None:
        self._hooks = list(webhooks)
        self._queues: dict[str, asyncio.Queue[list[News]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self.dropped = 0
        self.sent = 0

    @property
    def webhooks(self) -> list[Webhook]:
        return list(self._hooks)

    async def start(self) -> None:
        if not self._hooks:
            return
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
        for hook in self._hooks:
            queue: asyncio.Queue[list[News]] = asyncio.Queue(QUEUE_SIZE)
            self._queues[hook.name] = queue
            self._tasks.append(
                asyncio.create_task(self._run(hook, queue), name=f"notify-{hook.name}")
            )

    def send(self, hook: Webhook, post: list[News]) -> None:
        """Queue one post; never waits. A full queue loses its oldest post."""
        queue = self._queues.get(hook.name)
        if queue is None:
            return
        if queue.full():
            queue.get_nowait()
            queue.task_done()
            self.dropped += 1
            log.warning("notify.dropped", hint="queue full, oldest post dropped", webhook=hook.name,
                        dropped=self.dropped)  # fmt: skip
        queue.put_nowait(post)

    async def close(self, flush: float = FLUSH_S) -> None:
        """Give queued posts `flush` seconds, then stop."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(flush):
                await asyncio.gather(*(q.join() for q in self._queues.values()))
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()

    async def _run(self, hook: Webhook, queue: asyncio.Queue[list[News]]) -> None:
        while True:
            post = await queue.get()
            try:
                await self._deliver(hook, post)
            finally:
                queue.task_done()

    async def _deliver(self, hook: Webhook, post: list[News]) -> None:
        assert self._session is not None
        payload = json.dumps(body(hook.spec.format, post))
        loop = asyncio.get_running_loop()
        started = loop.time()
        tries = 0
        while True:
            tries += 1
            failed, why, retry_after = await self._post(hook, payload)
            if failed is None:
                self.sent += 1
                log.info("notify.sent", webhook=hook.name, kind=post[0].kind.value,
                         news=len(post), tries=tries)  # fmt: skip
                return
            pause = RETRY.pause(
                failed, tries, random.random, retry_after=retry_after, elapsed=loop.time() - started
            )
            if pause is None:
                log.warning("notify.failed", webhook=hook.name, reason=why, tries=tries)
                return
            await asyncio.sleep(pause)

    async def _post(self, hook: Webhook, payload: str) -> tuple[Failure | None, str, float | None]:
        """(None, "", None) when delivered; else (kind, why, Retry-After). `why` never holds
        the URL."""
        assert self._session is not None
        try:
            async with self._session.post(
                hook.url,
                data=payload,
                headers={"Content-Type": "application/json"},
                allow_redirects=False,
            ) as response:
                status = response.status
                header = response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return Failure.NO_ANSWER, f"no answer ({type(exc).__name__})", None
        if 200 <= status < 300:
            return None, "", None
        if status == 429 or status >= 500:
            retry_after = retry_after_seconds(header, datetime.now(UTC))
            return Failure.BUSY, f"HTTP {status}", retry_after
        return Failure.REFUSED, f"refused: HTTP {status}", None  # 3xx, 4xx: retrying will not help
