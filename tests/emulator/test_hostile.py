"""The `malformed` fault kind (hostile.py): each mode, set through the control API, as a raw
aiohttp GET sees it; and the validation of its fields."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest
from emulator_http import Http

from tpucared_emulator import EmulatorServer
from tpucared_emulator.hostile import DEEP_JSON_PAIRS

P, Z, T = "hostile", "us-central2-b", "v4-8"
NODES = f"/v2/projects/{P}/locations/{Z}/nodes"
LABELS = {"tpucared-fleet": "sweep", "tpucared-owner": "tests"}
SPEC = {
    "acceleratorType": T,
    "runtimeVersion": "tpu-vm-base",
    "schedulingConfig": {"spot": True},
    "labels": LABELS,
}
FAULTS = "/_emulator/v1/faults"


@pytest.fixture
async def two_nodes(http: Http) -> list[dict[str, Any]]:
    """Two READY nodes with our labels; the list as the emulator renders it, unfaulted."""
    for node_id in ("n-0", "n-1"):
        await http.ok("POST", NODES, SPEC, nodeId=node_id)
    for _ in range(200):
        nodes = (await http.ok("GET", NODES)).get("nodes", [])
        if len(nodes) == 2 and all(n["state"] == "READY" for n in nodes):
            await http.ok("DELETE", "/_emulator/v1/requests")
            return list(nodes)
        await asyncio.sleep(0.02)
    raise AssertionError("the nodes never became READY")


async def malformed(http: Http, mode: str, **fields: Any) -> None:
    """The next /v2 request meets a malformed answer in `mode`."""
    await http.ok("PUT", FAULTS, {"script": [{"kind": "malformed", "mode": mode, **fields}]})


async def raw_get(
    session: aiohttp.ClientSession, url: str, **params: str
) -> tuple[int, str, str, dict[str, str]]:
    """(status, content type, body text, headers) of a GET, redirects not followed."""
    async with session.get(url, params=params or None, allow_redirects=False) as response:
        text = await response.text()
        return response.status, response.content_type, text, dict(response.headers)


async def faults_logged(http: Http) -> list[str | None]:
    return [r["fault"] for r in await http.ok("GET", "/_emulator/v1/requests")]


# -- answers that are not a list at all ---------------------------------------------------------


async def test_not_json_is_an_html_page_with_200(
    emulator: EmulatorServer, http: Http, session: aiohttp.ClientSession
) -> None:
    await malformed(http, "not_json")
    status, content_type, text, _ = await raw_get(session, emulator.url + NODES)
    assert (status, content_type) == (200, "text/html")
    assert text.startswith("<!DOCTYPE html>")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert await faults_logged(http) == ["malformed"]
    assert (await http("GET", NODES))[0] == 200  # the script is used up: back to normal


async def test_deep_json_is_valid_json_nested_past_the_recursion_limit(
    emulator: EmulatorServer, http: Http, session: aiohttp.ClientSession
) -> None:
    await malformed(http, "deep_json")
    status, content_type, text, _ = await raw_get(session, emulator.url + NODES)
    assert (status, content_type) == (200, "application/json")
    assert 9_000 <= len(text.encode()) <= 12_000
    # Valid JSON: objects and arrays alternating 2,500 deep around one number.
    assert text == '{"a":[' * DEEP_JSON_PAIRS + "0" + "]}" * DEEP_JSON_PAIRS
    assert DEEP_JSON_PAIRS * 2 > 1000  # CPython's default recursion limit
    with pytest.raises(RecursionError):
        json.loads(text)
    assert await faults_logged(http) == ["malformed"]


async def test_error_envelope_is_sent_with_200(
    emulator: EmulatorServer, http: Http, session: aiohttp.ClientSession
) -> None:
    await malformed(http, "error_envelope")
    status, content_type, text, _ = await raw_get(session, emulator.url + NODES)
    assert (status, content_type) == (200, "application/json")
    error = json.loads(text)["error"]
    assert (error["code"], error["status"]) == (503, "UNAVAILABLE")
    assert error["message"]


async def test_redirect_points_at_another_host(
    emulator: EmulatorServer, http: Http, session: aiohttp.ClientSession
) -> None:
    await malformed(http, "redirect")
    status, _, _, headers = await raw_get(session, emulator.url + NODES, pageSize="7")
    assert status == 302
    assert headers["Location"] == f"http://127.0.0.2:9{NODES}?pageSize=7"
    assert [(r["status"], r["fault"]) for r in await http.ok("GET", "/_emulator/v1/requests")] == [
        (302, "malformed")
    ]


# -- the real node list, rewritten ---------------------------------------------------------------


async def test_labels_list_renders_each_nodes_labels_as_strings(
    http: Http, two_nodes: list[dict[str, Any]]
) -> None:
    await malformed(http, "labels_list")
    nodes = (await http.ok("GET", NODES))["nodes"]
    assert [n["name"] for n in nodes] == [n["name"] for n in two_nodes]
    for node in nodes:
        assert sorted(node["labels"]) == ["tpucared-fleet=sweep", "tpucared-owner=tests"]
        assert node["state"] == "READY"  # the rest is the real answer
    assert await faults_logged(http) == ["malformed"]


@pytest.mark.parametrize("value", ["SOMETHING_NEW", 99, True, {"x": 1}, None])
async def test_state_replaces_every_nodes_state_with_the_value(
    http: Http, two_nodes: list[dict[str, Any]], value: Any
) -> None:
    await malformed(http, "state", value=value)
    nodes = (await http.ok("GET", NODES))["nodes"]
    assert [n["state"] for n in nodes] == [value, value]
    assert [n["labels"] for n in nodes] == [LABELS, LABELS]
    assert (await http.ok("GET", NODES))["nodes"] == two_nodes  # one script entry, one list


async def test_duplicate_lists_the_first_node_again_preempted(
    http: Http, two_nodes: list[dict[str, Any]]
) -> None:
    await malformed(http, "duplicate")
    nodes = (await http.ok("GET", NODES))["nodes"]
    assert nodes[:2] == two_nodes
    assert nodes[2] == {**two_nodes[0], "state": "PREEMPTED"}


async def test_list_modes_leave_other_requests_alone(
    http: Http, two_nodes: list[dict[str, Any]]
) -> None:
    """A node GET (not a list) under a list mode: the real answer, and no fault logged."""
    for mode in ("labels_list", "duplicate", "endless_pages"):
        await malformed(http, mode)
        assert await http.ok("GET", f"{NODES}/n-0") == two_nodes[0]
    await malformed(http, "state", value="SOMETHING_NEW")
    status, body = await http("GET", NODES, pageToken="bogus")  # the handler's own error
    assert (status, body["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert await faults_logged(http) == [None] * 4


async def test_endless_pages_hands_out_the_first_page_with_fresh_tokens(
    http: Http, two_nodes: list[dict[str, Any]]
) -> None:
    await http.ok(
        "PUT",
        FAULTS,
        {"error_rate": 1.0, "kinds": ["malformed"], "mode": "endless_pages", "paths": ["/nodes"]},
    )
    tokens: list[str] = []
    page = await http.ok("GET", NODES, pageSize="1")
    for _ in range(10):
        assert page["nodes"] == two_nodes[:1]  # always the real first page
        tokens.append(page["nextPageToken"])
        page = await http.ok("GET", NODES, pageSize="1", pageToken=tokens[-1])
    assert len(set(tokens)) == len(tokens)
    assert await faults_logged(http) == ["malformed"] * 11
    await http.ok("DELETE", FAULTS)
    assert "nextPageToken" not in await http.ok("GET", NODES)


async def test_slow_headers_sends_nothing_for_the_delay_then_the_real_answer(
    http: Http, two_nodes: list[dict[str, Any]]
) -> None:
    await malformed(http, "slow_headers", delay_s=0.4)
    started = time.monotonic()
    assert (await http.ok("GET", NODES))["nodes"] == two_nodes
    assert time.monotonic() - started >= 0.4


async def test_slow_headers_stops_stalling_when_the_client_hangs_up(
    emulator: EmulatorServer, http: Http
) -> None:
    await malformed(http, "slow_headers", delay_s=60)
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=0.3)) as impatient:
        with pytest.raises(asyncio.TimeoutError):
            await impatient.get(emulator.url + NODES)
    assert time.monotonic() - started < 5

    async def logged() -> list[Any]:
        return list(await http.ok("GET", "/_emulator/v1/requests"))

    for _ in range(100):  # the stall ends once the emulator sees the connection closed
        if await logged():
            break
        await asyncio.sleep(0.02)
    assert [r["fault"] for r in await logged()] == ["malformed"]
    assert time.monotonic() - started < 5


# -- configuration -------------------------------------------------------------------------------


async def test_the_configuration_echoes_the_mode(http: Http) -> None:
    config = {
        "error_rate": 0.5,
        "kinds": ["malformed"],
        "mode": "slow_headers",
        "delay_s": 2,
        "script": [{"kind": "malformed", "mode": "state", "value": {"x": 1}}],
    }
    echoed = await http.ok("PUT", FAULTS, config)
    assert (echoed["mode"], echoed["delay_s"]) == ("slow_headers", 2.0)
    assert echoed["script_remaining"] == [
        {
            "kind": "malformed",
            "retry_after_s": None,
            "after": False,
            "mode": "state",
            "value": {"x": 1},
            "delay_s": None,
        }
    ]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"script": [{"kind": "malformed", "mode": "meteor"}]}, "script[0].mode"),
        ({"script": [{"kind": "ok"}, {"kind": "malformed"}]}, "script[1].mode"),
        ({"script": [{"kind": "malformed", "mode": "state"}]}, "script[0].value"),
        ({"script": [{"kind": "malformed", "mode": "slow_headers"}]}, "script[0].delay_s"),
        (
            {"script": [{"kind": "malformed", "mode": "slow_headers", "delay_s": "long"}]},
            "script[0].delay_s",
        ),
        ({"script": [{"kind": "internal", "mode": "not_json"}]}, "script[0].mode"),
        ({"error_rate": 1, "kinds": ["malformed"]}, "mode"),
        ({"error_rate": 1, "kinds": ["malformed"], "mode": "meteor"}, "mode"),
        (
            {"error_rate": 1, "kinds": ["malformed"], "mode": "slow_headers", "delay_s": -1},
            "delay_s",
        ),
        ({"error_rate": 1, "mode": "not_json"}, "kinds"),
    ],
)
async def test_malformed_validation_names_the_field(
    http: Http, config: dict[str, Any], field: str
) -> None:
    status, body = await http("PUT", FAULTS, config)
    assert status == 400, body
    error = body["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    (violation,) = error["details"][0]["fieldViolations"]
    assert violation["field"] == field
    assert (await http.ok("GET", FAULTS))["script_remaining"] == []  # nothing half-applied
