"""The webhook sender's retries follow the adapters' one retry rule (core/model/retry.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import pytest
from aiohttp import web

from tpucared.core.notify.news import News
from tpucared.core.notify.spec import NotifyFormat, NotifyOn, NotifySpec
from tpucared.notify import sender as sender_module
from tpucared.notify.sender import Webhook, WebhookSender

NEWS = News(
    NotifyOn.NOTICE, "zone", "warning: zone z unreachable", datetime(2026, 1, 1, tzinfo=UTC)
)

Answer = Callable[[int], web.Response]  # the n-th post (0-based) -> the answer
Serve = Callable[[Answer], Awaitable[tuple[str, list[float]]]]  # -> (url, when each post came)


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    runners: list[web.AppRunner] = []

    async def start(answer: Answer) -> tuple[str, list[float]]:
        times: list[float] = []

        async def handle(request: web.Request) -> web.Response:
            times.append(asyncio.get_running_loop().time())
            return answer(len(times) - 1)

        app = web.Application()
        app.router.add_post("/hook", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}/hook", times

    yield start
    for runner in runners:
        await runner.cleanup()


async def deliver(url: str) -> WebhookSender:
    hook = Webhook(NotifySpec("hook", url=url, format=NotifyFormat.JSON), url)
    sender = WebhookSender([hook])
    await sender.start()
    sender.send(hook, [NEWS])
    await sender.close(flush=10.0)
    return sender


class NoJitter:
    @staticmethod
    def random() -> float:
        return 0.0


async def test_retry_after_is_the_least_wait(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sender_module, "random", NoJitter)
    url, times = await serve(
        lambda n: (
            web.Response(status=503, headers={"Retry-After": "1"})
            if n == 0
            else web.Response(status=200)
        )
    )
    sender = await deliver(url)
    assert sender.sent == 1
    assert len(times) == 2
    assert times[1] - times[0] >= 0.9  # without the header, no jitter would have waited 0 s


async def test_a_refusal_is_not_retried(serve: Serve) -> None:
    url, times = await serve(lambda n: web.Response(status=404))
    sender = await deliver(url)
    assert sender.sent == 0
    assert len(times) == 1


async def test_a_retry_after_beyond_the_budget_gives_up(serve: Serve) -> None:
    url, times = await serve(lambda n: web.Response(status=429, headers={"Retry-After": "3600"}))
    sender = await deliver(url)
    assert sender.sent == 0
    assert len(times) == 1
