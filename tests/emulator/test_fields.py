"""Partial responses (`fields`, emulator/fields.py): the selector grammar, and the server
applying it to real v2 responses, lists included, the way the daemon's observer asks."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from emulator_http import Http

from tpucared.gcp.tpu.observe import NODE_LIST_FIELDS
from tpucared_emulator import EmulatorServer
from tpucared_emulator.errors import ApiError
from tpucared_emulator.fields import PartialMemo, apply, parse

P, Z = "fields-proj", "us-central2-b"
NODES = f"/v2/projects/{P}/locations/{Z}/nodes"
SPEC = {
    "acceleratorType": "v4-8",
    "runtimeVersion": "tpu-ubuntu2204-base",
    "labels": {"team": "a"},
    "metadata": {"ssh-keys": "u:ssh-ed25519 AAAA u"},
    "networkConfig": {"enableExternalIps": True},
}


@pytest.mark.parametrize(
    ("text", "selection"),
    [
        ("name", {"name": None}),
        ("a,b", {"a": None, "b": None}),
        ("a/b/c", {"a": {"b": {"c": None}}}),
        ("a(b,c/d),e", {"a": {"b": None, "c": {"d": None}}, "e": None}),
        (" a ( b ) , a/c ", {"a": {"b": None, "c": None}}),
        ("a,a/b", {"a": None}),  # a whole field stays whole
        ("*", {"*": None}),
    ],
)
def test_the_selector_grammar(text: str, selection: dict[str, Any]) -> None:
    assert parse(text) == selection


@pytest.mark.parametrize("text", ["", "a(", "a)", "a,,b", "a/", "(a)", "a b", "a(b", "a;b"])
def test_a_bad_selector_is_invalid_argument(text: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse(text)
    assert caught.value.status_name == "INVALID_ARGUMENT"


def test_apply_selects_inside_objects_and_each_list_element() -> None:
    data = {"items": [{"a": 1, "b": {"c": 2, "d": 3}}, {"a": 4}], "next": "t", "x": 5}
    assert apply(data, parse("items(a,b/c),next,missing")) == {
        "items": [{"a": 1, "b": {"c": 2}}, {"a": 4}],
        "next": "t",
    }
    assert apply(data, parse("*")) == data
    assert apply(data, None) is data


async def test_the_server_applies_fields_to_get_and_list(http: Http) -> None:
    for node_id in ("f-0", "f-1", "f-2"):
        await http.ok("POST", NODES, SPEC, nodeId=node_id)
    got = await http.ok("GET", f"{NODES}/f-0", fields="name,labels")
    assert got == {"name": f"projects/{P}/locations/{Z}/nodes/f-0", "labels": {"team": "a"}}

    # The observer's own selection, over pages: what it reads is there, the rest is not.
    page = await http.ok("GET", NODES, pageSize="2", fields=NODE_LIST_FIELDS)
    assert set(page) == {"nodes", "nextPageToken"}
    assert len(page["nodes"]) == 2
    full = await http.ok("GET", f"{NODES}/f-0")
    first = page["nodes"][0]
    assert "metadata" not in first
    # Of networkConfig, only what the drift notice compares (core/planning/drift.py).
    assert first["networkConfig"] == {
        k: full["networkConfig"][k] for k in ("network", "subnetwork")
    }
    partial = ("networkEndpoints", "networkConfig")
    assert {k: full[k] for k in first if k not in partial} == {
        k: v for k, v in first.items() if k not in partial
    }
    rest = await http.ok(
        "GET", NODES, pageSize="2", pageToken=page["nextPageToken"], fields=NODE_LIST_FIELDS
    )
    assert [n["name"].rsplit("/", 1)[1] for n in rest["nodes"]] == ["f-2"]
    assert "nextPageToken" not in rest


async def test_a_bad_selector_fails_before_the_request_acts(http: Http) -> None:
    status, body = await http("POST", NODES, SPEC, nodeId="never", fields="name(")
    assert status == 400
    assert body["error"]["status"] == "INVALID_ARGUMENT"
    status, _ = await http("GET", f"{NODES}/never")
    assert status == 404


def test_the_memo_selects_each_resource_once_and_never_serves_a_replaced_one() -> None:
    memo = PartialMemo(limit=3)
    selection = parse("items(a),next")
    first, second = {"a": 1, "b": 2}, {"a": 3, "b": 4}
    page = {"items": [first, second], "next": "t"}
    once = memo.apply(page, selection, "items(a),next")
    assert once == {"items": [{"a": 1}, {"a": 3}], "next": "t"}
    again = memo.apply(page, selection, "items(a),next")
    assert again == once
    assert again["items"][0] is once["items"][0]  # remembered, not selected afresh
    # A resource rendered again is a new object: selected afresh, whatever the old one was.
    replaced = {"a": 9, "b": 2}
    assert memo.apply({"items": [replaced, second]}, selection, "items(a),next") == {
        "items": [{"a": 9}, {"a": 3}]
    }
    # Another selection of the same resources is its own.
    assert memo.apply(page, parse("items(b)"), "items(b)") == {"items": [{"b": 2}, {"b": 4}]}
    # Past the limit the memo starts over, and still answers right.
    assert memo.apply(page, selection, "items(a),next") == once
    assert memo.apply(page, parse("*"), "*") is page


def test_a_page_of_the_same_resources_is_encoded_once() -> None:
    memo = PartialMemo()
    text = "items(a),next"
    selection = parse(text)
    first, second = {"a": 1, "b": 2}, {"a": 3, "b": 4}
    body = memo.body({"items": [first, second], "next": "t"}, selection, text)
    assert json.loads(body) == {"items": [{"a": 1}, {"a": 3}], "next": "t"}
    assert memo.body({"items": [first, second], "next": "t"}, selection, text) is body
    # Another token, another resource, one fewer: each encoded afresh, and right.
    assert json.loads(memo.body({"items": [first, second]}, selection, text)) == {
        "items": [{"a": 1}, {"a": 3}]
    }
    replaced = {"a": 9, "b": 2}
    assert json.loads(memo.body({"items": [first, replaced]}, selection, text)) == {
        "items": [{"a": 1}, {"a": 9}]
    }
    assert json.loads(memo.body({"items": [first]}, selection, text)) == {"items": [{"a": 1}]}


async def test_a_listed_node_shows_its_new_state_under_the_same_fields(
    http: Http, emulator: EmulatorServer
) -> None:
    await http.ok("POST", NODES, SPEC, nodeId="f-0")
    creating = await http.ok("GET", NODES, fields=NODE_LIST_FIELDS)
    assert [n["state"] for n in creating["nodes"]] == ["CREATING"]
    states = ["CREATING"]
    for _ in range(200):
        states = [
            n["state"] for n in (await http.ok("GET", NODES, fields=NODE_LIST_FIELDS))["nodes"]
        ]
        if states != ["CREATING"]:
            break
        await asyncio.sleep(0.05)
    assert states == ["READY"]
    await http.ok("POST", f"/_emulator/v1/projects/{P}/locations/{Z}/nodes/f-0:preempt")
    after = await http.ok("GET", NODES, fields=NODE_LIST_FIELDS)
    assert [n["state"] for n in after["nodes"]] == ["PREEMPTED"]
