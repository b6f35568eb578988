"""`PageMemo` (gcp/responses.py): a list page answered byte for byte as last time is not parsed
again; the caller gets the very objects of the last list, and the observer's node cache finds
them by identity. Anything else (a changed page, a shorter list, an error with the same body)
is read afresh."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from gcp_fakes import FakeApi, Reply

from tpucared.gcp.errors import ApiError
from tpucared.gcp.responses import PageMemo
from tpucared.gcp.retry import RetryPolicy
from tpucared.gcp.tpu.client import TpuClient
from tpucared.gcp.tpu.observe import NodeCache, observe_zone

P, Z = "my-project", "us-central2-b"


def node(name: str, state: str = "READY") -> dict[str, Any]:
    return {
        "name": f"projects/{P}/locations/{Z}/nodes/{name}",
        "state": state,
        "acceleratorType": "v4-8",
        "createTime": "2026-11-26T00:00:00Z",
    }


FIRST = {"nodes": [node("a"), node("b")], "nextPageToken": "p2"}
SECOND = {"nodes": [node("c")]}


@pytest.fixture
def api_url(fake_api: FakeApi) -> str:
    return fake_api.url


@pytest.fixture
def client_options() -> dict[str, Any]:
    async def no_sleep(_: float) -> None:
        return None

    return {"sleep": no_sleep, "retry": RetryPolicy()}


async def test_an_unchanged_page_is_the_same_objects_and_a_changed_one_is_read_afresh(
    fake_api: FakeApi, client: TpuClient
) -> None:
    memo = PageMemo()
    fake_api.push(Reply(200, FIRST), Reply(200, SECOND), Reply(200, FIRST), Reply(200, SECOND))
    first = await client.list_nodes(P, Z, page_size=2, memo=memo)
    again = await client.list_nodes(P, Z, page_size=2, memo=memo)
    assert again == first
    assert all(x is y for x, y in zip(again, first, strict=True))
    assert memo.reused == 2

    changed = {"nodes": [node("c", "PREEMPTED")]}
    fake_api.push(Reply(200, FIRST), Reply(200, changed))
    third = await client.list_nodes(P, Z, page_size=2, memo=memo)
    assert [n["state"] for n in third] == ["READY", "READY", "PREEMPTED"]
    assert third[0] is first[0]
    assert third[1] is first[1]
    assert memo.reused == 3

    # The list shrank to one page: the old second page is forgotten, so when a second page
    # comes back with the old bytes, it is parsed again (a new object, same content).
    fake_api.push(Reply(200, {"nodes": [node("a"), node("b")]}))
    assert len(await client.list_nodes(P, Z, page_size=2, memo=memo)) == 2
    fake_api.push(Reply(200, FIRST), Reply(200, changed))
    fourth = await client.list_nodes(P, Z, page_size=2, memo=memo)
    assert fourth[2] == third[2]
    assert fourth[2] is not third[2]


async def test_an_error_with_the_body_of_a_remembered_page_is_still_an_error(
    fake_api: FakeApi, client: TpuClient
) -> None:
    memo = PageMemo()
    fake_api.push(Reply(200, SECOND))
    assert len(await client.list_nodes(P, Z, memo=memo)) == 1
    fake_api.push(Reply(403, SECOND))
    with pytest.raises(ApiError):
        await client.list_nodes(P, Z, memo=memo)
    assert memo.reused == 0


async def test_the_observer_keeps_unchanged_nodes_through_an_unchanged_page(
    fake_api: FakeApi, client: TpuClient
) -> None:
    cache: NodeCache = {}
    memo = PageMemo()
    now = datetime.now(UTC)
    fake_api.push(Reply(200, FIRST), Reply(200, SECOND), Reply(200, FIRST), Reply(200, SECOND))
    before = await observe_zone(client, P, Z, now, cache=cache, pages=memo)
    after = await observe_zone(client, P, Z, now, cache=cache, pages=memo)
    assert before.ok
    assert after.ok
    assert [n.name for n in after.nodes] == ["a", "b", "c"]
    assert all(x is y for x, y in zip(after.nodes, before.nodes, strict=True))
    assert memo.reused == 2
