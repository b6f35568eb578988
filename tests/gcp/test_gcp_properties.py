"""Property tests of the client's edge: arbitrary HTTP answers from a real loopback server.

Hypothesis draws an answer (status, headers, a body that is arbitrary JSON, a node list with
arbitrary values in its fields, a redirect, bytes that are not JSON) and a real aiohttp
server sends it for every request; the real `TpuClient` and `observe_zone` read it. What
must hold, whatever came back:
- nothing escapes the client but a classified `ApiError`, and `observe_zone` never raises;
- an observation either failed (`error` set, no nodes: the planner concludes nothing) or
  every node in it was read from a well-formed entry: names are strings, labels a map of
  strings, and a state we could not read is UNRECOGNIZED, never a state we act on;
- a list that is not the documented shape is never read as an empty zone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpucared.core.model.specs import ErrorKind
from tpucared.gcp import ApiError, NoAuth, RetryPolicy
from tpucared.gcp.tpu import TpuClient
from tpucared.gcp.tpu.observe import observe_zone
from tpucared.gcp.tpu.states import NodeState

P, Z = "my-project", "us-central2-b"
T0 = datetime(2026, 11, 23, tzinfo=UTC)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Answer:
    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.status, self.body, self.headers = status, body, headers


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
states = st.sampled_from(["READY", "PREEMPTED", "TERMINATED", "CREATING", "UNKNOWN", "NEW_STATE"])
labels = st.dictionaries(
    st.sampled_from(["tpucared-fleet", "tpucared-owner", "team"]), st.text(max_size=5), max_size=3
)


@st.composite
def nodes(draw: st.DrawFn) -> Any:
    """A node entry: mostly well formed, any field possibly replaced by arbitrary JSON."""
    node: dict[str, Any] = {
        "name": f"projects/{P}/locations/{Z}/nodes/n{draw(st.integers(0, 3))}",
        "state": draw(states),
        "labels": draw(labels),
        "acceleratorType": "v4-8",
    }
    for key in draw(st.sets(st.sampled_from([*node, "health", "networkEndpoints", "id"]))):
        node[key] = draw(json_values)
    return node


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    kind = draw(st.sampled_from(["list", "json", "bytes", "status", "redirect", "deep"]))
    status, headers = 200, {"Content-Type": "application/json"}
    if kind == "list":
        page: dict[str, Any] = {"nodes": draw(st.lists(nodes(), max_size=4))}
        extra = draw(
            st.dictionaries(
                st.sampled_from(["error", "nextPageToken", "x"]), json_values, max_size=1
            )
        )
        page.update(extra)
        body = json.dumps(page).encode()
    elif kind == "json":
        body = json.dumps(draw(json_values)).encode()
    elif kind == "bytes":
        body = draw(st.binary(max_size=64))
    elif kind == "deep":
        depth = draw(st.integers(900, 5000))
        body = ("[" * depth + "]" * depth).encode()
    elif kind == "redirect":
        status = draw(st.sampled_from([301, 302, 303, 307, 308]))
        headers["Location"] = "http://127.0.0.2:9/v2/elsewhere"
        body = b""
    else:
        status = draw(st.integers(100, 599).filter(lambda s: s not in (101, 204, 304) and s >= 200))
        body = json.dumps(draw(json_values)).encode()
    return Answer(status, body, headers)


async def _serve(answer: Answer, go: Callable[[str], Awaitable[None]]) -> None:
    async def handle(_request: web.Request) -> web.Response:
        return web.Response(status=answer.status, body=answer.body, headers=answer.headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        await go(f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


def _client(url: str) -> TpuClient:
    async def no_sleep(_seconds: float) -> None:
        return None

    return TpuClient(url, token_source=NoAuth(), retry=RetryPolicy(max_attempts=2), sleep=no_sleep)


@SETTINGS
@given(answers())
def test_only_classified_errors_escape_the_client(answer: Answer) -> None:
    async def go(url: str) -> None:
        async with _client(url) as client:
            with contextlib.suppress(ApiError):
                await client.list_nodes(P, Z)

    asyncio.run(_serve(answer, go))


@SETTINGS
@given(answers())
def test_an_observation_is_understood_or_unknown_never_guessed(answer: Answer) -> None:
    seen: list[Any] = []

    async def go(url: str) -> None:
        async with _client(url) as client:
            seen.append(await observe_zone(client, P, Z, T0))

    asyncio.run(_serve(answer, go))
    (obs,) = seen
    if obs.error is not None:
        assert obs.nodes == ()
        return
    # Understood: the answer was a 2xx list page of the documented shape.
    assert 200 <= answer.status < 300
    page = json.loads(answer.body)  # an empty body is no list either
    assert isinstance(page, dict)
    assert set(page) <= {"nodes", "nextPageToken", "unreachable"}
    raw = page.get("nodes", [])
    assert len(obs.nodes) == len(raw)
    assert len({n.name for n in obs.nodes}) == len(obs.nodes)  # a name listed twice fails
    for node, entry in zip(obs.nodes, raw, strict=True):
        assert isinstance(entry["name"], str)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in node.labels.items())
        assert node.labels == entry.get("labels", {}) or entry.get("labels") is None
        if node.state is NodeState.UNRECOGNIZED:
            assert node.raw_state is not None
        else:
            assert entry.get("state") in (*NodeState, None, "") or isinstance(entry["state"], int)


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"code": 503, "message": "backend", "status": "UNAVAILABLE"}},
        {"nodes": [], "kind": "tpu#proxy"},
        {"nodes": {"n0": {}}},
    ],
)
async def test_a_200_that_is_not_a_node_list_is_malformed_not_empty(body: Any) -> None:
    seen: list[Any] = []

    async def go(url: str) -> None:
        async with _client(url) as client:
            seen.append(await observe_zone(client, P, Z, T0))

    await _serve(Answer(200, json.dumps(body).encode(), {}), go)
    assert seen[0].error is ErrorKind.MALFORMED
    assert seen[0].nodes == ()
