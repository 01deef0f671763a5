"""MCP at ``/mcp`` and the SSE event stream served by a real gunicorn (threaded workers, debug off), as in
production: the SDK's client completes a session through the WSGI server, and a stream ends on time."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.api.test_event_stream import parse
from tests.e2e.test_production import fetch, production_server, static_root

__all__ = ["production_server", "static_root"]  # the fixtures, used here by name

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_mcp_session_and_an_event_stream_through_gunicorn(production_server, project):
    from tasks_app.services.tokens import agent_token_issue

    key = agent_token_issue(project_id=str(project.id), name="remote", actor="test").key
    headers = {"Authorization": f"Bearer {key}", "X-Forwarded-Proto": "https"}

    async def session() -> dict[str, Any]:
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        async with (
            http,
            Client(streamable_http_client(f"{production_server}/mcp", http_client=http)) as client,
        ):
            tools = await client.list_tools()
            listed = await client.call_tool("list_tasks", {})
            return {"tools": {tool.name for tool in tools.tools}, "listed": listed.structured_content}

    # A thread of its own: the browser tests leave an event loop in this one (the server is another process).
    with ThreadPoolExecutor(max_workers=1) as thread:
        got = thread.submit(anyio.run, session).result()
    assert "compile_context" in got["tools"] and got["listed"]["results"] == []

    started = time.monotonic()
    status, response_headers, body = fetch(
        production_server, "/api/v1/events/stream?timeout=2", Authorization=f"Bearer {key}"
    )
    assert status == 200 and response_headers["Content-Type"].startswith("text/event-stream")
    assert 2 <= time.monotonic() - started < 10  # held open for the timeout, then closed
    events = parse(body.decode())
    assert "AgentTokenIssued" in [event["event"] for event in events]
