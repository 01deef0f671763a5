"""A database that cannot be reached is 503 ``database_unavailable`` with ``Retry-After`` (issue 23, item 5):
from REST in the one error shape, from ``/mcp`` as a JSON-RPC error (a tool call that runs: a result with
``isError``), debug on or off, never Django's HTML page; a caller sends the same request again later and
nothing was written meanwhile. Here the test's own connection is pointed where no database is (a file that
cannot be opened, a port nobody listens on); a real PostgreSQL cluster stopped under a real server is
tests/integration/test_faults.py."""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.db import InterfaceError, OperationalError, connection
from rest_framework.test import APIClient

from nexum.eventstore.models import Event
from nexum_web.api.errors import RETRY_AFTER_S, database_outage
from nexum_web.mcp.server import NEXUM_REFUSED
from tests.api.test_http_edge import assert_error

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def _port_nobody_listens_on() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def database_gone() -> Iterator[None]:
    """Every query of this thread fails as in an outage until the end of the test (connecting fails)."""
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent-folder/nexum.sqlite3"
    else:
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_port_nobody_listens_on()))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def assert_unavailable(response) -> dict:
    error = assert_error(response, 503, "database_unavailable")
    assert response["Retry-After"] == str(RETRY_AFTER_S)
    assert error["request_id"] == response["X-Request-ID"]
    assert "send the same request again" in error["message"]
    return error


def test_rest_reads_and_writes_are_503_while_the_database_is_gone(debug, api, project):
    before = Event.objects.count()
    with database_gone():
        assert_unavailable(api.get("/api/v1/tasks"))
        assert_unavailable(api.get("/api/v1/events"))
        body = {"objective": "ship", "tasks": [{"key": "a", "objective": "a"}]}
        assert_unavailable(api.post("/api/v1/goals", body, format="json", HTTP_IDEMPOTENCY_KEY="g-1"))
        assert_unavailable(api.get("/api/v1/events/stream?timeout=0"))
    assert Event.objects.count() == before  # nothing was written
    sent_again = api.post("/api/v1/goals", body, format="json", HTTP_IDEMPOTENCY_KEY="g-1")
    assert sent_again.status_code == 201, sent_again.content


def test_mcp_answers_a_jsonrpc_error_while_the_database_is_gone(debug, api):
    token = api._credentials["HTTP_AUTHORIZATION"]
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "list_tasks", "arguments": {}},
    }
    with database_gone():
        response = APIClient().post(
            "/mcp",
            json.dumps(call),
            content_type="application/json",
            HTTP_AUTHORIZATION=token,
            HTTP_ACCEPT="application/json, text/event-stream",
        )
    assert response.status_code == 503, response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == str(RETRY_AFTER_S)
    answer = response.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] == 7
    assert answer["error"]["code"] == NEXUM_REFUSED
    assert answer["error"]["message"].startswith("database_unavailable: ")
    assert answer["error"]["data"]["code"] == "database_unavailable"
    assert answer["error"]["data"]["status"] == 503
    assert answer["error"]["data"]["request_id"] == response["X-Request-ID"]


def test_any_other_exception_at_mcp_is_a_jsonrpc_internal_error_not_a_page(debug, api, monkeypatch):
    from nexum_web.mcp import http

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(http.AgentTokenAuthentication, "authenticate", broken)
    response = APIClient(raise_request_exception=False).post(
        "/mcp", '{"jsonrpc": "2.0", "id": "a", "method": "tools/list"}', content_type="application/json"
    )
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    answer = response.json()
    assert answer["id"] == "a" and answer["error"]["code"] == -32603
    assert answer["error"]["data"]["code"] == "server_error"
    assert "a bug" not in response.content.decode()


def _django(cause: BaseException) -> OperationalError:
    wrapped = OperationalError(str(cause))
    wrapped.__cause__ = cause
    return wrapped


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (_django(psycopg.OperationalError("connection failed: Connection refused")), True),
        (_django(psycopg.errors.AdminShutdown("terminating connection due to administrator command")), True),
        (_django(psycopg.errors.TooManyConnections("sorry, too many clients already")), True),
        (_django(psycopg.errors.CannotConnectNow("the database system is starting up")), True),
        (psycopg.InterfaceError("the connection is closed"), True),
        (InterfaceError("connection already closed"), True),
        (_django(sqlite3.OperationalError("unable to open database file")), True),
        (_django(sqlite3.OperationalError("database is locked")), True),
        (_django(psycopg.errors.QueryCanceled("canceling statement due to statement timeout")), False),
        (_django(psycopg.errors.DeadlockDetected("deadlock detected")), False),
        (_django(sqlite3.OperationalError("no such table: nexum_event")), False),
        (RuntimeError("a bug"), False),
    ],
    ids=lambda value: str(value) if isinstance(value, bool) else type(value.__cause__ or value).__name__,
)
def test_an_outage_is_told_from_a_bug_in_a_query(error, outage):
    assert database_outage(error) is outage


def test_an_open_stream_that_loses_the_database_ends_with_an_error_message(api, settings):
    settings.NEXUM_EVENT_STREAM_MAX_S = 30
    response = api.get("/api/v1/events/stream", {"timeout": 30})
    assert response.status_code == 200
    with database_gone():
        text = b"".join(response.streaming_content).decode()  # ends at once, not after 30 s
    assert text.startswith("retry: 1000\n\n")
    frame = text.split("\n\n")[1]
    assert frame.startswith("event: error\ndata: ")
    assert json.loads(frame.split("data: ", 1)[1])["error"]["code"] == "database_unavailable"


def test_an_answer_that_fails_to_render_under_api_is_json_debug_on_or_off(debug, api, monkeypatch):
    """DRF answers a view's exceptions itself; one raised while its answer renders reaches the edge
    middleware, which answers it in the error shape rather than Django's (debug) page."""
    from rest_framework.renderers import JSONRenderer

    def broken(*args, **kwargs):
        raise RuntimeError("a bug while rendering")

    monkeypatch.setattr(JSONRenderer, "render", broken)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=api._credentials["HTTP_AUTHORIZATION"])
    response = client.get("/api/v1/tasks")
    error = assert_error(response, 500, "server_error")
    assert error["request_id"] == response["X-Request-ID"]
    assert "a bug" not in response.content.decode()


def test_an_mcp_tool_call_while_the_database_is_gone_is_an_error_result_to_send_again(project):
    """The tool call runs (in process, no HTTP request around it) and the API answers 503: a tool result with
    ``isError`` that says to send the call again, the session going on."""
    from asgiref.sync import async_to_sync, sync_to_async
    from mcp import Client

    from nexum_web.mcp.calls import Caller
    from nexum_web.mcp.server import calling_as, server
    from tasks_app.services.tokens import agent_token_issue

    key = agent_token_issue(project_id=str(project.id), name="outage", role="agent", actor="test").key

    gone = database_gone()  # the connection is the test thread's: entered and left there

    async def run():
        with calling_as(Caller(token=key)):
            async with Client(server) as client:
                await sync_to_async(gone.__enter__, thread_sensitive=True)()
                try:
                    refused = await client.call_tool("list_tasks", {})
                finally:
                    await sync_to_async(gone.__exit__, thread_sensitive=True)(None, None, None)
                return refused, await client.call_tool("list_tasks", {})

    refused, again = async_to_sync(run)()
    assert refused.is_error and refused.structured_content["status"] == 503
    assert refused.structured_content["error"]["code"] == "database_unavailable"
    assert refused.content[0].text.startswith("database_unavailable: ")
    assert not again.is_error and again.structured_content["results"] == []
