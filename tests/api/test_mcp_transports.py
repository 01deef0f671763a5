"""The MCP server's two transports, each with the SDK's own client: Streamable HTTP at ``/mcp`` on a live
server (the bearer token checked first, stateless JSON answers), and stdio through ``manage.py nexum_mcp``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tasks_app.selectors import goal_tasks
from tasks_app.services.goals import goal_create
from tasks_app.services.tokens import agent_token_issue

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def agent_key(transactional_db, project) -> str:
    return agent_token_issue(project_id=str(project.id), name="desktop", role="agent", actor="test").key


@pytest.fixture
def task_id(project) -> str:
    goal = goal_create(
        project_id=str(project.id),
        objective="Ship",
        tasks=[{"key": "s1", "objective": "Build"}],
        actor="operator:test",
    )
    return str(goal_tasks(goal=goal).get().id)


async def record_and_read(client: Client, task_id: str) -> dict[str, Any]:
    names = {tool.name for tool in (await client.list_tools()).tools}
    started = await client.call_tool("start_task", {"task_id": task_id})
    fact = await client.call_tool("record_fact", {"task_id": task_id, "text": "the spec fails on expiry"})
    refused = await client.call_tool("record_fact", {"task_id": task_id, "text": ["not", "a", "string"]})
    task = await client.call_tool("get_task", {"task_id": task_id})
    prompts = await client.list_prompts()
    resources = await client.list_resources()
    return {
        "prompts": [prompt.name for prompt in prompts.prompts],
        "resources": [resource.uri for resource in resources.resources],
        "names": names,
        "started": started.structured_content,
        "fact": fact.structured_content,
        "refused": refused,
        "task": task.structured_content,
    }


def check(got: dict[str, Any]) -> None:
    assert {"record_fact", "compile_context", "request_completion"} <= got["names"]
    assert got["started"]["state"] == "running"
    assert got["fact"]["text"] == "the spec fails on expiry" and got["fact"]["actor"] == "agent:desktop"
    assert got["refused"].is_error and got["refused"].structured_content["error"]["field"] == "text"
    assert "(field: text)" in got["refused"].content[0].text
    assert got["task"]["version"] == got["started"]["version"]
    assert got["prompts"] == ["task_context"]
    assert got["resources"] == [f"nexum://tasks/{got['task']['id']}"]


def test_streamable_http_at_mcp_with_the_bearer_token(live_server, agent_key, task_id):
    url = f"{live_server.url}/mcp"

    async def run() -> dict[str, Any]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {agent_key}"}, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            return await record_and_read(client, task_id)

    check(async_to_sync(run)())

    anonymous = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"].startswith("Bearer")
    assert anonymous.json()["error"]["code"] == "not_authenticated"
    forged = httpx2.post(url, json={}, headers={"Authorization": "Bearer nope"}, timeout=30)
    assert forged.status_code == 401 and forged.json()["error"]["code"] == "authentication_failed"
    stream = httpx2.get(url, headers={"Authorization": f"Bearer {agent_key}"}, timeout=30)
    assert stream.status_code == 405  # stateless JSON mode: no server-to-client stream is held open


def _database_url() -> str:
    """The test database as a URL, for a process of its own."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    password = f":{settings['PASSWORD']}" if settings["PASSWORD"] else ""
    host = f"{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}"
    return f"postgres://{settings['USER']}{password}@{host}/{settings['NAME']}"


def test_stdio_through_the_management_command(agent_key, task_id):
    server = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "nexum_mcp", "--token", agent_key],
        cwd=str(REPOSITORY),
        env={**os.environ, "DATABASE_URL": _database_url()},
    )

    async def run() -> dict[str, Any]:
        async with Client(server, read_timeout_seconds=60) as client:
            return await record_and_read(client, task_id)

    check(async_to_sync(run)())
