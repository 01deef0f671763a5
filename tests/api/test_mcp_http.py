"""``/mcp`` as plain HTTP sees it (issue 29): a JSON-RPC batch is an array of answers under the protocol
version that has batches and a clear -32600 under one that removed them; a message that is no JSON-RPC
message is -32600 in words; ``/mcp/`` is the same endpoint, never an HTML 404."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

ACCEPT = "application/json, text/event-stream"


def post(api, body: Any, path: str = "/mcp", version: str | None = None):
    headers = {"HTTP_AUTHORIZATION": api._credentials["HTTP_AUTHORIZATION"], "HTTP_ACCEPT": ACCEPT}
    if version is not None:
        headers["HTTP_MCP_PROTOCOL_VERSION"] = version
    raw = body if isinstance(body, str) else json.dumps(body)
    return APIClient().post(path, raw, content_type="application/json", **headers)


def call(identifier: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": identifier, "method": method, **({"params": params} if params else {})}


@pytest.mark.parametrize("version", [None, "2025-03-26"])
def test_a_batch_is_an_array_of_answers_where_the_protocol_has_batches(api, version):
    batch = [
        call(1, "tools/list"),
        call(2, "tools/call", {"name": "list_tasks", "arguments": {"state": "sleeping"}}),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        call(3, "no/such/method"),
        {"id": 4},
    ]
    response = post(api, batch, version=version)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    answers = {answer["id"]: answer for answer in response.json()}
    assert set(answers) == {1, 2, 3, 4}  # the notification has no answer
    assert "list_tasks" in {tool["name"] for tool in answers[1]["result"]["tools"]}
    assert answers[2]["result"]["isError"] is True
    assert answers[2]["result"]["structuredContent"]["error"]["field"] == "state"
    assert answers[3]["error"]["code"] == -32601
    assert answers[4]["error"]["code"] == -32600 and '"jsonrpc": "2.0"' in answers[4]["error"]["message"]


def test_a_batch_of_notifications_only_is_accepted_with_no_answer(api):
    response = post(api, [{"jsonrpc": "2.0", "method": "notifications/initialized"}], version="2025-03-26")
    assert response.status_code == 202 and response.content == b""


def test_a_batch_under_a_protocol_without_batches_is_a_clear_invalid_request(api):
    response = post(api, [call(1, "tools/list"), call(2, "ping")], version="2025-11-25")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600 and "2025-11-25 has no JSON-RPC batches" in error["message"]
    assert "validation error" not in error["message"].lower()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ([], "empty batch"),
        ({"jsonrpc": "2.0", "id": 1}, '"method"'),
        ({"id": 1, "method": "ping"}, '"jsonrpc": "2.0"'),
        ({"jsonrpc": "2.0", "id": 1, "method": 7}, "is a string"),
        ("5", "is an object"),
    ],
)
def test_a_message_that_is_no_jsonrpc_message_is_invalid_request_in_words(api, body, words):
    response = post(api, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600 and words in error["message"], error
    assert "pydantic" not in error["message"]


@pytest.mark.parametrize("body", ["{not json", "[" * 100_000])
def test_a_body_that_is_no_json_is_a_parse_error(api, body):
    response = post(api, body)
    assert response.status_code == 400 and response.json()["error"]["code"] == -32700


def test_mcp_with_a_trailing_slash_answers_like_mcp(api):
    answered = {}
    for path in ("/mcp", "/mcp/"):
        response = post(api, call(1, "tools/call", {"name": "list_tasks", "arguments": {}}), path=path)
        assert response.status_code == 200 and response["Content-Type"] == "application/json", path
        answered[path] = response.json()["result"]["structuredContent"]
    assert answered["/mcp"] == answered["/mcp/"] == {"results": [], "next_cursor": None}
    anonymous = APIClient().post("/mcp/", json.dumps(call(1, "ping")), content_type="application/json")
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "not_authenticated"
