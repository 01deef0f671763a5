"""Three frameworks' own MCP clients against a live Nexum (``/mcp`` over Streamable HTTP with a bearer
token), each with a scripted model that slips once (issue 29): LangGraph's ``create_agent`` with tools from
langchain-mcp-adapters, the OpenAI Agents SDK's ``MCPServerStreamableHttp`` and PydanticAI's ``MCPToolset``.
The refused call comes back as a tool result with ``isError``; the run does not die, the model's next turn
carries the API's error text (tests/e2e/mcp_script.py corrects the call from that text alone), the refused
call wrote nothing, and the task completes through the gate."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from nexum_client import Nexum

from tests.e2e.mcp_script import ANSWER, PROGRESS, McpScript, Step, refusal_of

HERE = Path(__file__).resolve().parent
# langchain-mcp-adapters needs mcp<2 and the server mcp 2.x: its run has an interpreter of its own.
LANGCHAIN_MCP_PYTHON = Path(django_settings.BASE_DIR) / ".venv" / "langchain-mcp" / "bin" / "python"
# What the API says to the slip (nexum/core/roles.py), what the model must read in its next turn.
REFUSAL = "an agent token may claim at most agent_reported, not repository_authored"
MODEL_CALLS = 5  # start, the slip, the correction, the completion request, the answer


@pytest.fixture
def world(live_server, workspace, project) -> dict[str, Any]:
    """The agent's token, the MCP endpoint, and a started task the operator planned with a contract the
    gate passes (a command check in the test's workspace)."""
    from tasks_app.services.tokens import agent_token_issue

    agent = agent_token_issue(project_id=str(project.id), name="mcp-framework", actor="test").key
    operator = agent_token_issue(
        project_id=str(project.id), name="mcp-planner", role="operator", actor="test"
    ).key
    check = {"kind": "command", "name": "unit", "argv": ["sh", "-c", "echo 3 passed"], "timeout_s": 30}
    with Nexum(live_server.url, operator) as planner:
        goal = planner.create_goal(
            "Make verify_token refuse expired tokens",
            tasks=[{"key": "fix", "objective": "Make verify_token refuse expired tokens"}],
            contracts={"fix": {"checks": [check]}},
        )
    return {"url": f"{live_server.url}/mcp", "agent": agent, "task_id": goal.task("fix").id}


def recorded(task_id: str, event_type: str) -> list[dict[str, Any]]:
    from nexum.eventstore.models import Event

    rows = Event.objects.filter(event_type=event_type).order_by("position")
    return [row.data for row in rows if str(row.data.get("task_id")) == str(task_id)]


def assert_went_on_and_completed(task_id: str, answer: str, seen: list[list[str]]) -> None:
    """The run reached its answer after the slip, the model's third call carried the API's refusal, the
    refused call wrote nothing and the gate completed the task."""
    from tasks_app.models import Task

    assert answer == ANSWER, seen
    assert len(seen) == MODEL_CALLS
    refusal = refusal_of(seen[2][1])
    assert refusal is not None and REFUSAL in refusal[0] and refusal[1] == "trust_class", seen[2]
    progress = recorded(task_id, "ProgressRecorded")
    assert [(payload["text"], payload["trust_class"]) for payload in progress] == [
        (PROGRESS, "agent_reported")
    ]
    assert Task.objects.get(id=task_id).state == "completed"


def text_of(output: Any) -> str:
    """A tool answer as the model reads it: text as it is, content blocks' text joined, anything else JSON."""
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(block, dict) and "text" in block for block in output):
        return "\n".join(block["text"] for block in output)
    return json.dumps(output, default=str)


def test_langgraph_create_agent_with_langchain_mcp_adapters_reads_the_refusal_and_completes(world):
    assert LANGCHAIN_MCP_PYTHON.exists(), (
        f"{LANGCHAIN_MCP_PYTHON} is missing: `make .venv/.installed` builds it"
    )
    command = [str(LANGCHAIN_MCP_PYTHON), str(HERE / "langchain_mcp" / "run_agent.py")]
    finished = subprocess.run(
        [*command, world["url"], world["agent"], world["task_id"]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    run = json.loads(finished.stdout)
    assert [(message["tool"], message["status"]) for message in run["tool_messages"]] == [
        ("start_task", "success"),
        ("record_progress", "error"),
        ("record_progress", "success"),
        ("request_completion", "success"),
    ]
    assert REFUSAL in run["tool_messages"][1]["text"]
    assert_went_on_and_completed(world["task_id"], run["answer"], run["seen"])


def test_an_agents_sdk_run_over_mcp_server_streamable_http_reads_the_refusal_and_completes(world):
    from agents import Agent, RunConfig, Runner
    from agents.mcp import MCPServerStreamableHttp
    from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

    script = McpScript(world["task_id"])

    def respond(call: ModelCall) -> list:
        answers = [
            text_of(item["output"])
            for item in call.input
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        step: Step = script.next_step(answers)
        if step.answer is not None:
            return [assistant_message(step.answer)]
        return [function_call(step.tool, step.arguments, call_id=f"call-{len(answers) + 1}")]

    async def run() -> Any:
        headers = {"Authorization": f"Bearer {world['agent']}"}
        params = {"url": world["url"], "headers": headers, "timeout": 30}
        async with MCPServerStreamableHttp(params, name="nexum", cache_tools_list=True) as nexum:
            worker = Agent(
                name="nexum-mcp",
                instructions="Work the task you are given with Nexum's tools.",
                mcp_servers=[nexum],
                model=ScriptedModel([ModelStep.respond(respond) for _ in range(MODEL_CALLS)]),
            )
            return await Runner.run(
                worker, f"Work on task {world['task_id']}.", run_config=RunConfig(tracing_disabled=True)
            )

    result = asyncio.run(run())
    assert_went_on_and_completed(world["task_id"], str(result.final_output), script.seen)


def test_a_pydantic_ai_run_over_its_mcp_toolset_reads_the_refusal_and_completes(world):
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    script = McpScript(world["task_id"])

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answers = [
            text_of(part.content)
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart | RetryPromptPart)
        ]
        step = script.next_step(answers)
        if step.answer is not None:
            return ModelResponse(parts=[TextPart(step.answer)])
        call = ToolCallPart(step.tool, step.arguments, tool_call_id=f"call-{len(answers) + 1}")
        return ModelResponse(parts=[call])

    nexum = MCPToolset(world["url"], headers={"Authorization": f"Bearer {world['agent']}"})
    worker = Agent(FunctionModel(respond), toolsets=[nexum])
    result = worker.run_sync(f"Work on task {world['task_id']}.")
    assert_went_on_and_completed(world["task_id"], result.output, script.seen)
    # PydanticAI retries with the isError result's structured content, the API's error object (a protocol
    # error would reach the model as its message alone).
    refused = json.loads(script.seen[2][1])
    assert (refused["status"], refused["error"]["code"], refused["error"]["field"]) == (
        403,
        "forbidden",
        "trust_class",
    )
