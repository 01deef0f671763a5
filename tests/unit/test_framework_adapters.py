"""The framework adapters without a server (a mock transport answers): the PydanticAI history processor
records each answered tool call once and trims the history to the budget the last compile left, never
starting it with an orphaned tool answer; a LangChain tool that raises is recorded as an error; result
summaries are bounded."""

from __future__ import annotations

import json

import httpx
import pytest
from nexum_client import Context, Nexum
from nexum_client.adapters._common import SUMMARY_MAX, result_summary

ITEM = {"id": "i-1", "kind": "tool_call", "text": "t", "trust_class": "agent_reported", "position": 1}


@pytest.fixture
def recorded_calls() -> tuple[Nexum, list[dict]]:
    bodies: list[dict] = []

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/tool-calls"), request.url.path
        bodies.append(json.loads(request.content))
        return httpx.Response(201, json=ITEM)

    return Nexum("http://nexum.test", "tok", transport=httpx.MockTransport(answer)), bodies


def _context(window: int, total_tokens: int, reserve: int) -> Context:
    budget = {"window": window, "reserve_output_tokens": reserve, "context_tokens": total_tokens}
    body = {"digest": "d" * 64, "prompt_block": "ctx", "budget": budget, "total_tokens": total_tokens}
    return Context.from_json(body)


def _conversation():
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    return [
        ModelRequest(parts=[UserPromptPart("u" * 400)]),
        ModelResponse(parts=[ToolCallPart("read_file", {"path": "a.py"}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart("read_file", "r" * 400, tool_call_id="c1")]),
        ModelResponse(parts=[ToolCallPart("edit_file", {"path": "a.py"}, tool_call_id="c2")]),
        ModelRequest(
            parts=[ToolReturnPart("edit_file", "old text not found", tool_call_id="c2", outcome="retried")]
        ),
        ModelResponse(parts=[TextPart("done")]),
        ModelRequest(parts=[UserPromptPart("next")]),
    ]


def test_the_history_processor_records_each_answered_tool_call_once(recorded_calls):
    from nexum_client.adapters.pydantic_ai import NexumContext

    nexum, bodies = recorded_calls
    nexum_context = NexumContext(nexum, "t-1", "local")
    messages = _conversation()
    assert nexum_context.history_processor(None, messages) == messages  # no compile yet: nothing trimmed
    nexum_context.history_processor(None, messages)
    assert [(body["tool"], body["arguments"]) for body in bodies] == [
        ("read_file", {"path": "a.py"}),
        ("edit_file", {"path": "a.py"}),
    ]
    assert bodies[0]["result_summary"] == "r" * 400
    assert bodies[1]["result_summary"] == "retried: old text not found"


def test_the_history_processor_keeps_the_newest_messages_within_the_budget(recorded_calls):
    from nexum_client.adapters.pydantic_ai import NexumContext
    from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

    nexum, _ = recorded_calls
    nexum_context = NexumContext(nexum, "t-1", "local")
    messages = _conversation()
    # 1000 - 800 - 100 = 100 tokens for the history: the two 400-character parts (101 tokens each) cannot
    # both stay; dropping the user prompt alone would start the history with the call's answer.
    nexum_context.compiler.contexts.append(_context(window=1000, total_tokens=800, reserve=100))
    assert nexum_context.history_budget() == 100
    kept = nexum_context.history_processor(None, messages)
    assert kept == messages[-1:]
    assert nexum_context.dropped_messages == len(messages) - 1
    first = kept[0]
    assert isinstance(first, ModelRequest) and isinstance(first.parts[0], UserPromptPart)
    assert not any(isinstance(part, ToolReturnPart) for part in first.parts)

    nexum_context.compiler.contexts.append(_context(window=100_000, total_tokens=800, reserve=100))
    assert nexum_context.history_processor(None, messages) == messages
    assert nexum_context.dropped_messages == 0


def test_a_langchain_tool_that_raises_is_recorded_as_an_error_and_the_error_goes_on(recorded_calls):
    from nexum_client.adapters.langchain import NexumMiddleware

    nexum, bodies = recorded_calls

    class Request:
        tool_call = {"name": "run_tests", "args": {"k": "expiry"}, "id": "c1"}

    def failing_tool(request):
        raise RuntimeError("pytest exited with 2")

    with pytest.raises(RuntimeError, match="exited with 2"):
        NexumMiddleware(nexum, "t-1", "local").wrap_tool_call(Request(), failing_tool)
    assert bodies == [
        {"tool": "run_tests", "result_summary": "error: pytest exited with 2", "arguments": {"k": "expiry"}}
    ]


def test_result_summaries_are_never_blank_and_bounded():
    assert result_summary("  ") == "(the tool returned nothing)"
    assert result_summary({"b": 1}) == '{"b": 1}'
    long = result_summary("x" * (SUMMARY_MAX * 2))
    assert len(long) == SUMMARY_MAX and long.endswith("…")


def test_the_langchain_middleware_compiles_and_records_on_the_async_path_too():
    import asyncio

    from langchain.agents.middleware import ModelRequest
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from nexum_client.adapters.langchain import NexumMiddleware

    paths: list[str] = []
    tool_calls: list[dict] = []

    def answer(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path.endswith("/compile"):
            body = json.loads(request.content)
            assert (body["model"], body["focus"]) == ("local", "the expiry check")
            return httpx.Response(200, json={"context": {"digest": "d" * 64, "prompt_block": "## Task\nfix"}})
        tool_calls.append(json.loads(request.content))
        return httpx.Response(201, json=ITEM)

    nexum = Nexum("http://nexum.test", "tok", transport=httpx.MockTransport(answer))
    middleware = NexumMiddleware(nexum, "t-1", "local", focus="the expiry check")
    request = ModelRequest(
        model=FakeListChatModel(responses=["ok"]),
        messages=[HumanMessage("go")],
        system_message=SystemMessage("Be brief."),
    )

    async def model_handler(sent):
        return sent

    sent = asyncio.run(middleware.awrap_model_call(request, model_handler))
    assert sent.system_prompt == "Be brief.\n\n## Task\nfix"
    assert [context.digest for context in middleware.contexts] == ["d" * 64]

    class ToolRequest:
        tool_call = {"name": "read_file", "args": {"path": "a.py"}, "id": "c1"}

    async def tool_handler(_request):
        return ToolMessage("no such file", tool_call_id="c1", status="error")

    assert asyncio.run(middleware.awrap_tool_call(ToolRequest(), tool_handler)).text == "no such file"
    assert paths == ["/api/v1/tasks/t-1/compile", "/api/v1/tasks/t-1/tool-calls"]
    assert tool_calls[0]["result_summary"] == "error: no such file"


def _refusing_recorder() -> Nexum:
    """Compiles answer; every record is refused (404): a run must not go on with a gap in the log."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/compile"):
            return httpx.Response(200, json={"context": {"digest": "d" * 64, "prompt_block": "ctx"}})
        error = {
            "code": "not_found",
            "message": "no such task",
            "field": None,
            "details": {},
            "request_id": "r",
        }
        return httpx.Response(404, json={"error": error})

    return Nexum("http://nexum.test", "tok", transport=httpx.MockTransport(answer), retries=0)


def read_file(path: str) -> str:
    """Read a file."""
    return "1 line"


def test_a_refused_tool_call_record_ends_an_agents_sdk_run_with_the_clients_error():
    import asyncio

    from agents import Agent, RunConfig, Runner, UserError, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call
    from nexum_client import NotFound
    from nexum_client.adapters.openai_agents import NexumInstructions, NexumRunHooks

    nexum = _refusing_recorder()
    model = ScriptedModel(
        [[function_call("read_file", {"path": "a"}, call_id="c1")], [assistant_message("ok")]]
    )
    agent = Agent(
        name="a",
        instructions=NexumInstructions(nexum, "t-1", "local"),
        tools=[function_tool(read_file)],
        model=model,
    )
    run = Runner.run(
        agent, "go", hooks=NexumRunHooks(nexum, "t-1"), run_config=RunConfig(tracing_disabled=True)
    )
    with pytest.raises(UserError, match="no such task") as ended:
        asyncio.run(run)
    assert isinstance(ended.value.__cause__, NotFound)


def test_a_refused_tool_call_record_ends_a_pydantic_ai_run_with_the_clients_error():
    from nexum_client import NotFound
    from nexum_client.adapters.pydantic_ai import NexumContext
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def respond(messages, info):
        answered = any(
            isinstance(part, ToolReturnPart)
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
        )
        if answered:
            return ModelResponse(parts=[TextPart("ok")])
        return ModelResponse(parts=[ToolCallPart("read_file", {"path": "a"}, tool_call_id="c1")])

    nexum_context = NexumContext(_refusing_recorder(), "t-1", "local")
    agent = Agent(
        FunctionModel(respond),
        instructions=nexum_context.instructions,
        tools=[read_file],
        capabilities=[ProcessHistory(nexum_context.history_processor)],
    )
    with pytest.raises(NotFound, match="no such task"):
        agent.run_sync("go")
