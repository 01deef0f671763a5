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
