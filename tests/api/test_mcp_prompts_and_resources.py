"""The MCP prompt ``task_context`` and the listed resources (issue 29), through the SDK's own client: the
prompt is the compiled context as a message, recorded like any compile; the resources are the project's
tasks, a page at a time, each readable; refusals are JSON-RPC errors carrying the API's error object."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from context_app.compilation.models import ContextCompilation, StoredContext
from nexum_web.mcp import prompts
from tests.api.test_mcp import planned, session, token  # noqa: F401 (planned: a fixture)

pytestmark = pytest.mark.django_db


def test_the_task_context_prompt_is_the_compiled_context_as_a_message(project, planned):  # noqa: F811
    task_id = planned["tasks"][0]["id"]

    async def steps(client: Client) -> dict[str, Any]:
        listed = await client.list_prompts()
        await client.call_tool("record_fact", {"task_id": task_id, "text": "Tokens expire after 15 minutes"})
        arguments = {"task_id": task_id, "model": "quick", "focus": "token expiry"}
        prompt = await client.get_prompt("task_context", arguments)
        return {"listed": listed, "prompt": prompt}

    got = session(token(project), steps)
    [listed] = got["listed"].prompts
    assert listed.name == "task_context"
    assert {(a.name, a.required) for a in listed.arguments} == {
        ("task_id", True),
        ("model", True),
        ("focus", False),
    }
    [message] = got["prompt"].messages
    assert message.role == "user" and "Tokens expire after 15 minutes" in message.content.text
    assert "focus: token expiry" in message.content.text
    stored = StoredContext.objects.get()  # the prompt's compile is recorded as any other
    assert ContextCompilation.objects.get().status == "done"
    assert stored.digest in got["prompt"].description and stored.prompt_block == message.content.text


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("task_context", {"model": "quick"}, "task_id"),
        ("task_context", {"task_id": "T"}, "model"),
        ("task_context", {"task_id": "T", "model": "quick", "colour": "red"}, "colour"),
        ("no_such_prompt", {"task_id": "T", "model": "quick"}, "name"),
    ],
)
def test_a_bad_prompt_request_is_an_invalid_params_error_naming_the_argument(
    project,
    planned,  # noqa: F811
    name,
    arguments,
    field,
):
    arguments = {
        key: planned["tasks"][0]["id"] if value == "T" else value for key, value in arguments.items()
    }

    async def steps(client: Client) -> MCPError:
        with pytest.raises(MCPError) as raised:
            await client.get_prompt(name, arguments)
        return raised.value

    error = session(token(project), steps)
    assert error.code == types.INVALID_PARAMS and error.data["field"] == field and field in error.message


def test_an_api_refusal_of_the_prompt_carries_the_apis_error(project, other_project, planned):  # noqa: F811
    task_id = planned["tasks"][0]["id"]

    async def steps(client: Client) -> dict[str, MCPError]:
        errors = {}
        for case, arguments in (
            ("unknown model", {"task_id": task_id, "model": "no-such-model"}),
            ("other project", {"task_id": "00000000-0000-0000-0000-000000000000", "model": "quick"}),
        ):
            with pytest.raises(MCPError) as raised:
                await client.get_prompt("task_context", arguments)
            errors[case] = raised.value
        return errors

    errors = session(token(project), steps)
    assert errors["other project"].data["status"] == 404
    assert errors["unknown model"].data["status"] in (400, 404, 422)
    assert errors["unknown model"].data["request_id"]


def test_resources_list_the_projects_tasks_a_page_at_a_time(project, operator_api, monkeypatch):
    plan = {"objective": "Ship", "tasks": [{"key": f"s{n}", "objective": f"Step {n}"} for n in range(5)]}
    goal = operator_api.post("/api/v1/goals", plan, format="json").json()
    monkeypatch.setattr(prompts, "RESOURCES_PAGE", 2)

    async def steps(client: Client) -> dict[str, Any]:
        pages = []
        cursor = None
        for _ in range(5):  # bounded: 5 tasks, 2 a page
            page = await client.list_resources(cursor=cursor)
            pages.append(page)
            cursor = page.next_cursor
            if cursor is None:
                break
        first = pages[0].resources[0]
        read = await client.read_resource(first.uri)
        with pytest.raises(MCPError) as bad_cursor:
            await client.list_resources(cursor="not-a-cursor")
        return {"pages": pages, "read": read, "first": first, "bad_cursor": bad_cursor.value}

    got = session(token(project), steps)
    assert [len(page.resources) for page in got["pages"]] == [2, 2, 1]
    uris = [resource.uri for page in got["pages"] for resource in page.resources]
    assert sorted(uris) == sorted(f"nexum://tasks/{task['id']}" for task in goal["tasks"])
    assert got["first"].title.startswith("Step ") and got["first"].mime_type == "application/json"
    assert got["first"].uri == f"nexum://tasks/{json.loads(got['read'].contents[0].text)['id']}"
    assert got["bad_cursor"].code == types.INVALID_PARAMS and got["bad_cursor"].data["field"] == "cursor"
