"""PydanticAI: ``NexumContext`` gives an agent its instructions from the task's compiled context and a
history processor that records each tool call to Nexum and keeps the message history within what the
model's window leaves beside that context (``pip install 'nexum-client[pydantic-ai]'``).

    nexum_context = NexumContext(nexum, task_id, "local")
    agent = Agent(model, instructions=nexum_context.instructions,
                  capabilities=[ProcessHistory(nexum_context.history_processor)])

PydanticAI asks for the instructions before every model request, so each request gets a fresh compile. The
history budget is the model's ``window`` less the compiled context's tokens and the output reserve (the
compile's ``budget``); message sizes are estimated at 4 characters a token, since the framework's messages
are not counted by the server. The oldest messages go first, never the latest request, and the history never
starts with a tool's answer whose call was dropped.
"""

from __future__ import annotations

from typing import Any

from nexum_client.adapters._common import TaskCompiler, missing_framework, with_context
from nexum_client.client import Nexum
from nexum_client.models import Context

try:
    from pydantic_ai import RunContext
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        ToolCallPart,
        ToolReturnPart,
    )
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise missing_framework("pydantic-ai", error) from error

CHARS_PER_TOKEN = 4


class NexumContext:
    """The task's context for one PydanticAI agent run. ``contexts``: one per model request;
    ``recorded_calls``: the ids of the tool calls recorded; ``dropped_messages``: how many messages the
    history processor left out last time."""

    def __init__(
        self, nexum: Nexum, task_id: str, model: str, *, base: str | None = None, focus: str | None = None
    ) -> None:
        self.compiler = TaskCompiler(nexum, task_id, model, focus)
        self.base = base
        self.recorded_calls: set[str] = set()
        self.dropped_messages = 0

    @property
    def contexts(self) -> list[Context]:
        return self.compiler.contexts

    def instructions(self, ctx: RunContext[Any]) -> str:
        """For ``Agent(instructions=...)`` or ``@agent.instructions``: the agent's own instructions
        (``base``) and the freshly compiled context."""
        return with_context(self.base, self.compiler.compile())

    def history_processor(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """For ``ProcessHistory(...)``: records the tool calls answered since the last request, then keeps
        the newest messages that fit the history budget."""
        self._record_answered_calls(messages)
        return self._within_budget(messages)

    def _record_answered_calls(self, messages: list[ModelMessage]) -> None:
        calls = {
            part.tool_call_id: part
            for message in messages
            if isinstance(message, ModelResponse)
            for part in message.parts
            if isinstance(part, ToolCallPart)
        }
        for message in messages:
            if not isinstance(message, ModelRequest):
                continue
            for part in message.parts:
                if not isinstance(part, ToolReturnPart | RetryPromptPart) or part.tool_name is None:
                    continue
                if part.tool_call_id in self.recorded_calls or part.tool_call_id not in calls:
                    continue
                if isinstance(part, RetryPromptPart):  # deprecated: PydanticAI 2 sends outcome="retried"
                    result = f"error: {part.model_response()}"
                elif part.outcome != "success":
                    result = f"{part.outcome}: {part.model_response_str(wrap_if_error=False)}"
                else:
                    result = part.model_response_str()
                arguments = calls[part.tool_call_id].args_as_dict()
                self.compiler.record_tool_call(part.tool_name, arguments, result)
                self.recorded_calls.add(part.tool_call_id)

    def history_budget(self) -> int | None:
        """Tokens left for the message history beside the last compiled context (None before a compile)."""
        if not self.contexts:
            return None
        context = self.contexts[-1]
        window = int(context.budget.get("window", 0))
        reserve = int(context.budget.get("reserve_output_tokens", 0))
        return max(window - context.total_tokens - reserve, 0)

    def _within_budget(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        budget = self.history_budget()
        kept = list(messages)
        if budget is not None:
            while len(kept) > 1 and sum(_estimated_tokens(message) for message in kept) > budget:
                kept.pop(0)
            while len(kept) > 1 and not _opens_history(kept[0]):
                kept.pop(0)
        self.dropped_messages = len(messages) - len(kept)
        return kept


def _estimated_tokens(message: ModelMessage) -> int:
    characters = sum(
        len(str(getattr(part, "content", "") or getattr(part, "args", ""))) for part in message.parts
    )
    return characters // CHARS_PER_TOKEN + 1


def _opens_history(message: ModelMessage) -> bool:
    """A history may start with a request that answers no tool call (a dropped call would orphan it)."""
    return isinstance(message, ModelRequest) and not any(
        isinstance(part, ToolReturnPart | RetryPromptPart) and part.tool_name is not None
        for part in message.parts
    )
