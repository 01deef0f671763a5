"""What hosts read before calling (issue 29): every tool declares an output schema its results match (its
answers and its refusals), schemas a strict host takes (no free-form maps, no allOf, one type per schema,
nullable as an anyOf with a null branch, as the MCP Inspector's --strict recommends), honest annotations, and
the server's version."""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

import jsonschema
import mcp_types as types
import pytest
from mcp import Client

from nexum.eventstore.models import Event
from nexum_web.mcp.json_schema import ANY_JSON
from nexum_web.mcp.tools import TOOLS
from tests.api.test_mcp import call_refused, session, structured, token
from tests.api.test_verification_api import echo_check
from tests.integration.compile_world import load_catalog

pytestmark = pytest.mark.django_db

APPENDS = {
    "record_fact",
    "record_decision",
    "record_failure",
    "record_progress",
    "record_tool_call",
    "record_artifact",
    "verify_fact",
    "create_goal",
    "compile_context",
    "resolve_context",
    "start_task",
    "fail_task",
    "block_task",
    "request_completion",
    "request_approval",
}


def listed(caller) -> dict[str, types.Tool]:
    async def steps(client: Client) -> dict[str, Any]:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        return {"tools": tools, "server": client.server_info}

    got = session(caller, steps)
    assert got["server"].name == "nexum" and got["server"].version == version("nexum")
    return got["tools"]


def nodes(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every subschema of ``schema`` with its JSON pointer."""
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(schema, dict):
        found.append((path, schema))
        for key, value in schema.items():
            found.extend(nodes(value, f"{path}/{key}"))
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            found.extend(nodes(value, f"{path}/{index}"))
    return found


def closed_objects(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """The object schemas in ``schema`` outside an explicit any-JSON value, with their JSON pointers."""
    if isinstance(schema, list):
        return [
            found for index, item in enumerate(schema) for found in closed_objects(item, f"{path}/{index}")
        ]
    if not isinstance(schema, dict) or schema.get("anyOf") == ANY_JSON["anyOf"]:
        return []
    found = [(path, schema)] if schema.get("type") == "object" else []
    for key, value in schema.items():
        members = value.items() if key == "properties" else [(None, value)]
        for member, child in members:
            found.extend(closed_objects(child, f"{path}/{key}" + (f"/{member}" if member else "")))
    return found


def test_every_tool_has_an_output_schema_and_input_schemas_a_strict_host_takes(project):
    tools = listed(token(project))
    assert set(tools) == set(TOOLS)
    any_json: list[str] = []
    for name, tool in tools.items():
        output = tool.output_schema
        assert output is not None and output["type"] == "object", name
        assert output["anyOf"][-1]["required"] == ["error", "status"], name  # a refusal's structured content
        for where, schema in (("input", tool.input_schema), ("output", output)):
            for pointer, node in nodes(schema):
                if pointer.endswith("/properties"):
                    continue  # a map of member names, not a schema
                at = f"{name} {where} {pointer}"
                assert "allOf" not in node and "nullable" not in node and "$ref" not in node, at
                assert not isinstance(node.get("type"), list), at
                if pointer and not pointer.endswith(("/enum", "/required", "/default")):
                    assert node, f"{at}: a schema that constrains nothing"
        for pointer, node in nodes(tool.input_schema):
            if node.get("anyOf") == ANY_JSON["anyOf"]:
                any_json.append(f"{name} {pointer}")
        for pointer, node in closed_objects(tool.input_schema):
            at = f"{name} input {pointer}"
            assert "properties" in node and node.get("additionalProperties") is False, at
    # The one argument that is any JSON value: the recorded call's own arguments, as the model passed them.
    assert any_json == ["record_tool_call /properties/arguments"]
    sources = tools["resolve_context"].input_schema["properties"]["sources"]
    assert sources["type"] == "array" and sources["items"]["required"] == ["source"]
    checked = [pointer for pointer, _ in closed_objects(tools["resolve_context"].input_schema)]
    assert checked == ["", "/properties/sources/items"]  # the walk reaches nested objects
    nullable = tools["compile_context"].input_schema["properties"]["compaction"]
    assert nullable["anyOf"] == [{"type": "boolean"}, {"type": "null"}] and "description" in nullable
    assert "contracts" not in tools["create_goal"].input_schema["properties"]


def test_annotations_say_what_a_host_may_assume(project):
    tools = listed(token(project))
    for name, tool in tools.items():
        hints = tool.annotations
        get = TOOLS[name].method == "GET"
        assert hints.read_only_hint is get, name
        if name in APPENDS:
            assert hints.destructive_hint is False, name
    for name in ("retract_fact", "supersede_fact", "set_contract"):
        assert tools[name].annotations.destructive_hint is True, name
    assert tools["start_task"].annotations.idempotent_hint is True
    assert tools["record_progress"].annotations.idempotent_hint is False
    assert tools["resolve_context"].annotations.open_world_hint is True


@pytest.fixture
def planned(project, operator_api, workspace, tmp_path, settings):
    """A goal whose task has a passing contract and a tickets source granted, and the model catalog."""
    settings.NEXUM_SOURCE_ROOTS = [tmp_path]
    load_catalog(str(project.id))
    tickets = tmp_path / "ops.json"
    tickets.write_text(json.dumps([{"id": "1", "subject": "deploy port", "text": "The port is 8080."}]))
    source = {"name": "ops", "kind": "tickets_json", "config": {"path": str(tickets)}}
    assert operator_api.post("/api/v1/sources", source, format="json").status_code == 201
    body = {
        "objective": "Ship",
        "tasks": [{"key": "s1", "objective": "Configure the deploy port", "inputs": ["deploy port"]}],
        "contracts": {"s1": {"checks": [echo_check("unit", "echo 3 passed")]}},
    }
    goal = operator_api.post("/api/v1/goals", body, format="json").json()
    grant = {"sources": {"ops": ["*"]}}
    assert operator_api.post(f"/api/v1/goals/{goal['id']}/grants", grant, format="json").status_code == 201
    return goal


def test_each_tools_results_match_its_output_schema(project, planned, operator_api):
    """The SDK's client checks every result against the tool's output schema: each tool called once."""
    task_id, goal_id = planned["tasks"][0]["id"], planned["id"]

    async def steps(client: Client) -> dict[str, Any]:
        got: dict[str, Any] = {}

        async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            got[name] = structured(await client.call_tool(name, arguments))
            return got[name]

        await call("start_task", {"task_id": task_id})
        fact = await call("record_fact", {"task_id": task_id, "text": "Port 8080", "subject": "deploy port"})
        await call("supersede_fact", {"fact_id": fact["id"], "text": "Port 8081"})
        await call("record_decision", {"goal_id": goal_id, "text": "UTC", "rationale": "one clock"})
        await call("record_failure", {"task_id": task_id, "text": "the first try timed out"})
        await call("record_progress", {"task_id": task_id, "text": "half done"})
        await call(
            "record_tool_call",
            {
                "task_id": task_id,
                "tool": "grep",
                "arguments": {"pattern": "port"},
                "result_summary": "2 hits",
            },
        )
        await call(
            "record_artifact", {"task_id": task_id, "uri": "file:///x", "summary": "a", "content_text": "x"}
        )
        await call("list_items", {"task": task_id})
        await call("get_fact", {"fact_id": fact["id"]})
        await call("resolve_context", {"task_id": task_id, "sources": [{"source": "ops", "scopes": ["*"]}]})
        await call("list_escalations", {})
        got["compiled"] = await call("compile_context", {"task_id": task_id, "model": "quick"})
        usage = {"prompt_tokens": 900, "completion_tokens": 30, "provider": "vllm", "model": "gemma"}
        await call("report_usage", {"digest": got["compiled"]["digest"], **usage, "cost": 0.002})
        queued = await call("compile_context", {"task_id": task_id, "model": "quick", "async": True})
        await call("get_compile", {"request_id": queued["request_id"]})
        await call("list_tasks", {})
        await call("get_task", {"task_id": task_id})
        await call("get_goal", {"goal_id": goal_id})
        completed = await call("request_completion", {"task_id": task_id, "answer": "done"})
        await call("get_completion", {"request_id": completed["completion"]["request_id"]})
        await call("create_goal", {"objective": "Next", "tasks": [{"key": "a", "objective": "b"}]})
        other = got["create_goal"]["tasks"][0]["id"]
        await call("start_task", {"task_id": other})
        await call("fail_task", {"task_id": other, "reason": "x"})
        await call("start_task", {"task_id": other})
        await call("block_task", {"task_id": other, "reason": "y"})
        own = await call("record_fact", {"task_id": other, "text": "z"})
        await call("verify_fact", {"fact_id": own["id"]})
        await call("retract_fact", {"fact_id": own["id"], "reason": "wrong"})
        asked = await call("request_approval", {"task_id": other, "action": "deploy", "reason": "ship it"})
        await call("get_approval", {"approval_id": asked["id"]})
        await call("list_approvals", {"state": "pending"})
        return got

    got = session(token(project), steps)
    operators = {"set_contract", "decide_approval", "fork"}  # called in test_mcp and test_approvals_mcp
    assert set(got) - {"compiled"} == set(TOOLS) - operators
    assert [item["text"] for item in got["resolve_context"]["bundle"]["items"]] == ["The port is 8080."]
    assert "Port 8081" in got["compiled"]["prompt_block"] and got["compiled"]["resource"].startswith("nexum:")
    assert got["compile_context"]["url"]  # async: true answers the request to poll (run at once: eager)
    assert got["get_compile"]["status"] == "done" and got["get_compile"]["digest"]
    assert got["request_completion"]["outcome"] == "completed"


def test_a_refusals_structured_content_matches_the_output_schema_too(project, planned):
    """Some clients (the MCP Inspector) check an isError result against the output schema as well."""
    agent = token(project)
    tools = listed(agent)
    for name, arguments in (
        ("list_tasks", {"state": "sleeping"}),
        ("get_task", {"task_id": "no-such-task"}),
        ("compile_context", {"task_id": planned["tasks"][0]["id"], "model": "no-such-model"}),
    ):
        refused = call_refused(agent, name, arguments)
        jsonschema.validate({"error": refused.error, "status": refused.status}, tools[name].output_schema)


def test_resolve_sources_as_a_list_refuses_what_the_map_could_not_say(project, planned):
    task_id = planned["tasks"][0]["id"]
    agent = token(project)
    before = Event.objects.count()
    for sources, message in (
        ([{"source": "ops"}, {"source": "ops", "scopes": []}], "named twice"),
        ({"ops": ["*"]}, "a list"),
        ([{"name": "ops"}], "{source"),
    ):
        refused = call_refused(agent, "resolve_context", {"task_id": task_id, "sources": sources})
        assert refused.status == 400 and refused.error["field"] == "sources" and message in refused.text
    assert Event.objects.count() == before


def test_a_call_the_annotations_call_idempotent_writes_once(project, planned):
    task_id = planned["tasks"][0]["id"]
    agent = token(project)

    async def steps(client: Client) -> list[int]:
        counts = []
        for _ in range(2):
            await client.call_tool("start_task", {"task_id": task_id})
            counts.append(await _count())
        fact = structured(await client.call_tool("record_fact", {"task_id": task_id, "text": "stale"}))
        for _ in range(2):
            await client.call_tool("retract_fact", {"fact_id": fact["id"], "reason": "stale"})
            counts.append(await _count())
        for _ in range(2):
            await client.call_tool("request_completion", {"task_id": task_id, "answer": "done"})
            counts.append(await _count())
        goal = structured(
            await client.call_tool(
                "create_goal", {"objective": "o", "tasks": [{"key": "a", "objective": "b"}]}
            )
        )
        other = goal["tasks"][0]["id"]
        await client.call_tool("start_task", {"task_id": other})
        for name in ("block_task", "block_task", "fail_task"):
            await client.call_tool(name, {"task_id": other, "reason": "waiting"})
            counts.append(await _count())
        return counts

    counts = session(agent, steps)
    assert counts[0] == counts[1] and counts[2] == counts[3] and counts[4] == counts[5]
    assert counts[6] == counts[7] == counts[8]  # blocked: a second block and a fail are refused


async def _count() -> int:
    from asgiref.sync import sync_to_async

    return await sync_to_async(Event.objects.count, thread_sensitive=True)()
