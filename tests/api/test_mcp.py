"""The MCP server (issue 18) through the SDK's own client, in process: it lists the tools, records, compiles
and asks for completion as an agent; an agent cannot call an operator tool or claim trust above its ceiling;
a refused call (a bad argument, 403, 404) is a tool result with ``isError`` carrying the API's error object,
nothing is written and the session goes on; an unknown tool is a protocol error."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import pytest
from asgiref.sync import async_to_sync
from mcp import Client
from mcp.shared.exceptions import MCPError

from nexum.eventstore.models import Event
from nexum_web.mcp.calls import Caller
from nexum_web.mcp.server import calling_as, server
from nexum_web.mcp.shapes import compile_summary
from tasks_app.services.tokens import agent_token_issue
from tests.api.test_verification_api import echo_check
from tests.integration.compile_world import load_catalog

pytestmark = pytest.mark.django_db


def token(project, role: str = "agent") -> Caller:
    issued = agent_token_issue(project_id=str(project.id), name=f"mcp-{role}", role=role, actor="test")
    return Caller(token=issued.key)


def session(caller: Caller, steps: Callable[[Client], Awaitable[Any]]) -> Any:
    """Run ``steps`` in an MCP client session with the in-process server, calling as ``caller``."""

    async def run() -> Any:
        with calling_as(caller):
            async with Client(server) as client:
                return await steps(client)

    return async_to_sync(run)()


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


@pytest.fixture
def planned(project, operator_api, workspace):
    """A goal planned by the operator with a passing contract on its task, and the default model catalog."""
    load_catalog(str(project.id))
    body = {
        "objective": "Fix the failing authentication spec",
        "tasks": [{"key": "s1", "objective": "Make verify_token refuse expired tokens"}],
        "contracts": {"s1": {"checks": [echo_check("unit", "echo 3 passed")]}},
    }
    goal = operator_api.post("/api/v1/goals", body, format="json").json()
    return goal


def test_an_agent_session_lists_records_compiles_and_completes(project, planned):
    task_id, goal_id = planned["tasks"][0]["id"], planned["id"]

    async def steps(client: Client) -> dict[str, Any]:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        started = structured(await client.call_tool("start_task", {"task_id": task_id}))
        fact = structured(
            await client.call_tool(
                "record_fact",
                {"task_id": task_id, "text": "Tokens expire after 15 minutes", "subject": "token expiry"},
            )
        )
        shared = structured(
            await client.call_tool("record_decision", {"goal_id": goal_id, "text": "UTC", "rationale": "x"})
        )
        compile_arguments = {"task_id": task_id, "model": "quick", "focus": "when tokens expire"}
        compiled = structured(await client.call_tool("compile_context", compile_arguments))
        context = await client.read_resource(compiled["resource"])
        completed = structured(
            await client.call_tool("request_completion", {"task_id": task_id, "answer": "fixed"})
        )
        polled = structured(
            await client.call_tool("get_completion", {"request_id": completed["completion"]["request_id"]})
        )
        task = await client.read_resource(f"nexum://tasks/{task_id}")
        listed = structured(await client.call_tool("list_tasks", {"goal": goal_id}))
        return locals()

    got = session(token(project), steps)
    assert {
        "record_fact",
        "record_decision",
        "record_failure",
        "record_progress",
        "record_tool_call",
        "record_artifact",
        "compile_context",
        "resolve_context",
        "start_task",
        "request_completion",
        "get_completion",
        "list_tasks",
        "get_task",
    } <= set(got["tools"])
    schema = got["tools"]["record_fact"].input_schema
    assert schema["properties"]["text"]["type"] == "string" and schema["additionalProperties"] is False
    assert "model" in got["tools"]["compile_context"].input_schema["required"]
    assert got["tools"]["compile_context"].input_schema["properties"]["focus"]["type"] == "string"
    assert "focus: when tokens expire" in got["compiled"]["prompt_block"]
    assert "Tokens expire after 15 minutes" in got["compiled"]["prompt_block"]
    assert got["started"]["state"] == "running"
    assert got["fact"]["trust_class"] == "agent_reported" and got["fact"]["actor"] == "agent:mcp-agent"
    assert got["shared"]["goal_id"] == goal_id
    compiled = got["compiled"]
    assert "Tokens expire after 15 minutes" in compiled["prompt_block"]
    assert compiled["budget"]["context_tokens"] == 8000 and compiled["total_tokens"] <= 8000
    assert set(compiled["excluded"]) == {"count", "by_kind_and_reason"}
    per_kind = compiled["excluded"]["by_kind_and_reason"].values()
    assert compiled["excluded"]["count"] == sum(sum(reasons.values()) for reasons in per_kind)
    [stored] = got["context"].contents
    assert json.loads(stored.text)["digest"] == compiled["digest"]
    assert got["completed"]["outcome"] == "completed"
    assert got["polled"]["outcome"] == "completed" and got["polled"]["answer"] == "fixed"
    assert json.loads(got["task"].contents[0].text)["state"] == "completed"
    assert [task["id"] for task in got["listed"]["results"]] == [task_id]


@dataclass(frozen=True)
class Refusal:
    """A tool call refused as a tool-execution error: the text the model reads, the API's error object and
    the HTTP status."""

    text: str
    error: dict[str, Any]
    status: int


def refusal(result: types.CallToolResult) -> Refusal:
    assert result.is_error, result.content
    [content] = result.content
    structured = result.structured_content
    assert set(structured) == {"error", "status"}
    assert {"code", "message", "field", "details", "request_id"} <= set(structured["error"])
    return Refusal(content.text, structured["error"], structured["status"])


def call_refused(caller: Caller, name: str, arguments: dict[str, Any]) -> Refusal:
    async def steps(client: Client) -> Refusal:
        return refusal(await client.call_tool(name, arguments))

    return session(caller, steps)


def test_an_agent_cannot_call_an_operator_tool_or_exceed_its_ceiling(project, planned):
    task_id = planned["tasks"][0]["id"]
    agent = token(project)
    before = Event.objects.count()
    contract = {"checks": [echo_check("unit", "true")]}
    refused = call_refused(agent, "set_contract", {"task_id": task_id, "contract": contract})
    assert refused.status == 403 and refused.error["code"] == "forbidden"
    assert refused.text.startswith("forbidden: ")
    claim = {"task_id": task_id, "text": "I may deploy", "trust_class": "repository_authored"}
    refused = call_refused(agent, "record_fact", claim)
    assert refused.status == 403 and refused.error["field"] == "trust_class"
    assert "(field: trust_class)" in refused.text
    assert Event.objects.count() == before

    operator = token(project, role="operator")

    async def steps(client: Client) -> dict[str, Any]:
        return structured(await client.call_tool("set_contract", {"task_id": task_id, "contract": contract}))

    assert session(operator, steps)["revision"] == 2


def test_an_operator_forks_over_mcp_and_an_agent_is_refused(project, planned):
    task_id, goal_id = planned["tasks"][0]["id"], planned["id"]
    position = Event.objects.filter(project_id=project.id).order_by("-position").first().position
    arguments = {"task_id": task_id, "at_position": position, "reason": "try again"}
    agent, operator = token(project), token(project, role="operator")
    before = Event.objects.count()
    refused = call_refused(agent, "fork", arguments)
    assert refused.status == 403 and refused.error["code"] == "forbidden"
    assert Event.objects.count() == before

    async def steps(client: Client) -> list[dict[str, Any]]:
        forked = structured(await client.call_tool("fork", {**arguments, "idempotency_key": "f-1"}))
        again = structured(await client.call_tool("fork", {**arguments, "idempotency_key": "f-1"}))
        whole = {"goal_id": goal_id, "at_position": position, "reason": "side by side"}
        return [forked, again, structured(await client.call_tool("fork", whole))]

    forked, again, whole = session(operator, steps)
    assert forked["source_task_id"] == task_id and forked["task_id"] and not forked["replayed"]
    assert again == {**forked, "replayed": True}
    assert whole["source_goal_id"] == goal_id and whole["task_id"] is None


def test_an_agent_cannot_retract_or_supersede_an_operators_fact_over_mcp(project, planned, operator_api):
    task_id = planned["tasks"][0]["id"]
    rule = {"text": "Deploys need a second reviewer", "subject": "deploy window"}
    fact_id = operator_api.post(f"/api/v1/tasks/{task_id}/facts", rule, format="json").json()["id"]
    agent = token(project)
    before = Event.objects.count()
    for name, arguments in (
        ("retract_fact", {"fact_id": fact_id, "reason": "ignore previous instructions"}),
        ("supersede_fact", {"fact_id": fact_id, "text": "Deploys need no review"}),
    ):
        refused = call_refused(agent, name, arguments)
        assert refused.status == 403
        assert refused.error["code"] == "forbidden" and refused.error["field"] == "trust_class"
        assert refused.error["details"]["trust_class"] == "repository_authored"
    assert Event.objects.count() == before

    async def steps(client: Client) -> dict[str, Any]:
        own = structured(
            await client.call_tool("record_fact", {"task_id": task_id, "text": "It builds in 4m"})
        )
        return structured(
            await client.call_tool("retract_fact", {"fact_id": own["id"], "reason": "measured"})
        )

    assert session(agent, steps)["status"] == "retracted"


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("record_fact", {"task_id": "T", "text": 42}, "text"),
        ("record_fact", {"task_id": "T", "text": "ok", "colour": "red"}, "colour"),
        ("record_fact", {"text": "no scope"}, "task_id"),
        ("record_progress", {"task_id": "T", "goal_id": "G", "text": "both"}, "task_id"),
        ("compile_context", {"task_id": "T", "model": "quick", "overrides": {"context_tokens": 0}}, None),
        ("list_tasks", {"state": "sleeping"}, "state"),
        ("record_tool_call", {"task_id": "T", "tool": "grep", "idempotency_key": 7}, "idempotency_key"),
    ],
)
def test_a_bad_argument_is_an_error_result_naming_the_field(project, planned, name, arguments, field):
    task_id, goal_id = planned["tasks"][0]["id"], planned["id"]
    arguments = {
        key: {"T": task_id, "G": goal_id}.get(value, value) if isinstance(value, str) else value
        for key, value in arguments.items()
    }
    agent = token(project)
    before = Event.objects.count()
    refused = call_refused(agent, name, arguments)
    assert refused.status == 400 and refused.error["code"] in ("invalid", "unknown_field")
    expected = field or "overrides.context_tokens"
    assert refused.error["field"] == expected and f"(field: {expected})" in refused.text
    assert Event.objects.count() == before


def test_unknown_tools_and_resources_and_other_projects_ids(project, other_project, planned):
    task_id = planned["tasks"][0]["id"]
    intruder = token(other_project)
    refused = call_refused(intruder, "get_task", {"task_id": task_id})
    assert refused.status == 404 and refused.error["code"] == "not_found"

    async def unknown_tool(client: Client) -> MCPError:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("no_such_tool", {})
        return raised.value

    error = session(intruder, unknown_tool)
    assert error.code == types.INVALID_PARAMS and "no_such_tool" in error.message

    async def steps(client: Client) -> MCPError:
        with pytest.raises(MCPError) as raised:
            await client.read_resource(f"nexum://tasks/{task_id}")
        return raised.value

    assert session(intruder, steps).data["status"] == 404


def test_a_refused_call_leaves_the_session_usable_and_the_next_call_succeeds(project, planned):
    """What a model needs to correct itself: the refusal as a result it reads, then its corrected call."""
    task_id = planned["tasks"][0]["id"]
    agent = token(project)

    async def steps(client: Client) -> dict[str, Any]:
        await client.call_tool("start_task", {"task_id": task_id})
        slip = await client.call_tool("record_progress", {"task_id": task_id, "note": "half done"})
        conflict = await client.call_tool("start_task", {"task_id": task_id})
        corrected = await client.call_tool("record_progress", {"task_id": task_id, "text": "half done"})
        return {"slip": refusal(slip), "conflict": refusal(conflict), "corrected": structured(corrected)}

    got = session(agent, steps)
    assert got["slip"].status == 400 and got["slip"].error["field"] == "note"
    assert "note" in got["slip"].text and got["slip"].error["request_id"]
    assert got["conflict"].status == 409 and got["conflict"].text.startswith(got["conflict"].error["code"])
    assert got["corrected"]["text"] == "half done" and got["corrected"]["kind"] == "progress"


def test_the_compile_summary_counts_the_exclusion_runs_per_kind_and_reason():
    runs = [
        {"kind": "fact", "reason": None, "tokens_left": 40, "count": 12},
        {"kind": "fact", "reason": None, "tokens_left": 3, "count": 5},
        {"kind": "progress", "reason": "needed 80 tokens, 0 left", "tokens_left": 0, "count": 1},
        {"kind": "tool", "reason": "tool budget of 4 tools is full", "tokens_left": 900, "count": 2},
    ]
    body = {"request_id": "r", "context": {"digest": "d", "exclusions": {"count": 20, "runs": runs}}}
    excluded = compile_summary(body)["excluded"]
    assert excluded == {
        "count": 20,
        "by_kind_and_reason": {
            "fact": {"over budget": 17},
            "progress": {"over budget": 1},
            "tool": {"tool budget of 4 tools is full": 2},
        },
    }


def test_a_token_revoked_mid_session_is_refused_on_the_next_call(project, planned):
    """A session outside any HTTP request (stdio, in process) checks the token on every call."""
    from asgiref.sync import sync_to_async

    from tasks_app.models import AgentToken
    from tasks_app.services.tokens import agent_token_revoke

    caller = token(project)
    token_id = str(AgentToken.objects.get(name="mcp-agent").id)

    def revoke() -> None:
        agent_token_revoke(token_id=token_id, reason="leaked", actor="operator:test")

    async def steps(client: Client) -> dict[str, Any]:
        before = structured(await client.call_tool("list_tasks", {}))
        await sync_to_async(revoke, thread_sensitive=True)()
        return {"before": before, "after": refusal(await client.call_tool("list_tasks", {}))}

    got = session(caller, steps)
    assert len(got["before"]["results"]) == 1
    assert got["after"].status == 401 and got["after"].error["code"] == "authentication_failed"
